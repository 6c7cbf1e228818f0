#!/usr/bin/python3
"""GStreamer's rtsp-server relaying one upstream RTSP stream at rtsp://ADDRESS:PORT/relay:
the peer vigil's relay is compared with on the bed of hosts (tests/tests/hosts.rs,
`lossy_viewers_vigil_beside_gstreamer`). Usage: gst_relay.py UPSTREAM ADDRESS PORT.
The media is shared by every viewer (one upstream pull), as vigil's relay is; the RTP is
re-payloaded, as any relay that re-times it must."""
import sys

import gi

gi.require_version("Gst", "1.0")
gi.require_version("GstRtspServer", "1.0")
from gi.repository import GLib, Gst, GstRtspServer  # noqa: E402

Gst.init(None)
upstream, address, port = sys.argv[1], sys.argv[2], sys.argv[3]
server = GstRtspServer.RTSPServer()
server.set_address(address)
server.set_service(port)
# The default listen backlog (5) refuses viewers that connect in a burst (a fan-out bench
# ramps at 200/s); the kernel's own default for a server is far larger.
server.set_backlog(1024)
factory = GstRtspServer.RTSPMediaFactory()
factory.set_launch(
    f"( rtspsrc location={upstream} protocols=tcp latency=200 ! rtph264depay ! h264parse "
    "! rtph264pay name=pay0 pt=96 config-interval=-1 mtu=1400 )"
)
factory.set_shared(True)
server.get_mount_points().add_factory("/relay", factory)
server.attach(None)
print("ready", flush=True)
GLib.MainLoop().run()
