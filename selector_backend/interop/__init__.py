"""Other ecosystems' words for the same builds: Spack specs and Horovod build settings.

``spack`` translates specs and build-cache listings into catalog variants and
generates the Spack package; ``horovod`` turns a resolved variant into
HOROVOD_* build variables. Both answer through the engine's rules.
"""

__all__ = ["horovod", "spack"]
