"""Shared startup for the two fixture agents: uvicorn on 127.0.0.1, then one readiness line."""

import argparse

import uvicorn


class _Server(uvicorn.Server):
    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)  # binds and listens; exits the process (status 3) if it cannot
        if self.started:
            # --port 0 lets the OS pick a free port: name the one actually bound.
            port = self.servers[0].sockets[0].getsockname()[1]
            print(f"listening on 127.0.0.1:{port}", flush=True)


def serve(app) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True, help="0 = any free port")
    port = parser.parse_args().port
    # A short graceful shutdown: on SIGTERM/SIGINT an open SSE stream is cut after 1 s
    # instead of holding the process until the run ends.
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=1)
    _Server(config).run()
