# Type stub of the compiled module blockx._fast.reservations: its public interface is that
# of its pure-Python twin, blockx._fast.reservations_py (the same tests run against both).
from blockx._fast.reservations_py import *  # noqa: F401,F403
