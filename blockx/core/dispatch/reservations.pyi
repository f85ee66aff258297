# Type stub of the compiled module blockx.core.dispatch.reservations: its public interface is that
# of its pure-Python twin, blockx.core.dispatch.reservations_py (the same tests run against both).
from blockx.core.dispatch.reservations_py import *  # noqa: F401,F403
