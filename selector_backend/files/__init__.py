"""Local files, read and written safely: atomic writes, untrusted text, TOML, archives, the private cache.

Everything that touches the user's disk on behalf of the engine goes through
here, so "never half-written" and "one-line error naming the file" are kept in
one place.
"""

__all__ = ["archives", "atomic", "private_cache", "safeparse", "tomlfile"]
