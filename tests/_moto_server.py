"""Run a moto S3 server on 127.0.0.1 and an OS-chosen port; print the port.

Started as a subprocess by the ``s3_server`` fixture (a process of its own, so
racing clients do not share the test process's GIL with the server). Stops
when its standard input closes.
"""

from __future__ import annotations

import sys

from moto.server import ThreadedMotoServer

server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print(server._server.server_port, flush=True)
sys.stdin.read()
server.stop()
