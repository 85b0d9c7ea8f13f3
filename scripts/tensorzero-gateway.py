#!/usr/bin/env python3
"""Starts TensorZero's gateway (embedded in the `tensorzero` wheel) with a config file, on
loopback, and prints the URL it listens on as the only line on stdout; then waits until it
is killed, which stops the gateway with it (it runs in this process).

The wheel's gateway picks its own port (`[gateway] bind_address` is ignored), so the URL is
how a caller finds it: `conform scenarios --gateway tensorzero --spawn` reads the first URL
printed. The gateway's own logs go to stderr, so that stdout carries nothing else.

usage: tensorzero-gateway.py CONFIG.toml    (run with the python of the venv that has it:
       `scripts/gateways.sh spawn tensorzero` prints the whole command)
"""
import os
import signal
import sys
import threading


def main() -> int:
    if len(sys.argv) != 2:
        print("usage: tensorzero-gateway.py CONFIG.toml", file=sys.stderr)
        return 2
    os.environ["TENSORZERO_DISABLE_PSEUDONYMOUS_USAGE_ANALYTICS"] = "1"
    # Keep stdout for the URL: the gateway (Rust, in this process) logs to fd 1.
    announce = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    import tensorzero

    gateway = tensorzero._start_http_gateway(
        config_file=sys.argv[1],
        clickhouse_url=None,
        postgres_url=None,
        valkey_url=None,
        async_setup=False,
    )
    announce.write(f"{gateway.base_url}\n")
    announce.flush()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    stop.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
