# Type stub of the compiled module blockx._fast.cachekey: its public interface is that
# of its pure-Python twin, blockx._fast.cachekey_py (the same tests run against both).
from blockx._fast.cachekey_py import *  # noqa: F401,F403
