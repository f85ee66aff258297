"""sleep_ms(ms) -> ms, after sleeping that long (counts against the call budget)."""

from blockx_executor import sdk


def main(ms):
    sdk.sleep(ms)
    return ms
