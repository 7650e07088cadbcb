"""The Spack bridge: spec strings, build-cache listings, the picker, package.py.

Spack users describe builds as specs (``py-horovod +cuda cuda_arch=80``) and
find prebuilt ones in build caches. This package translates both into the
engine's terms (catalog variants, HostProfile, resolve) so Spack answers come
from the same catalog and compatibility rules as everything else.
"""
