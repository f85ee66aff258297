# Type stub of the compiled module blockx._fast.codec: its public interface is that
# of its pure-Python twin, blockx._fast.codec_py (the same tests run against both).
from blockx._fast.codec_py import *  # noqa: F401,F403
