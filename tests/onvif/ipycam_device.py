#!/usr/bin/env python3
"""Runs the ONVIF device of PyPI's `ipycam` (its device, media and PTZ services and its
WS-Discovery responder) on a loopback address, for tests/tests/onvif.rs.

Only the wiring is here: the SOAP handling, the WS-Security digest check, the profiles,
GetStreamUri and the ProbeMatch are ipycam's own (`ipycam.onvif`, `ipycam.http`,
`ipycam.discovery`). ipycam's `IPCamera` would also start its encoders and RTSP server
from OpenCV frames; the stream URI it hands out points instead at a vigil node serving
the demo clip (`--rtsp-port`, `--main`, `--sub`), so the camera added through ONVIF plays.

Prints "ready <port>" once the HTTP service listens; runs until stdin closes.
"""

import argparse
import socketserver
import sys
import threading

from ipycam.config import CameraConfig
from ipycam.discovery import WSDiscoveryServer
from ipycam.http import IPCameraHTTPHandler
from ipycam.onvif import ONVIFService
from ipycam.ptz import PTZController


class Camera:
    """What ipycam's HTTP handler reads of its camera for the /onvif/ routes."""

    def __init__(self, config, onvif, ptz):
        self.config = config
        self.onvif = onvif
        self.ptz = ptz


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    daemon_threads = True


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--ip", required=True)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--user", required=True)
    p.add_argument("--password", required=True)
    p.add_argument("--rtsp-port", type=int, required=True)
    p.add_argument("--main", default="live/demo")
    p.add_argument("--sub", default="live/demo2")
    p.add_argument("--discovery", action="store_true")
    a = p.parse_args()

    http = Server((a.ip, a.port), IPCameraHTTPHandler)
    port = http.server_address[1]
    config = CameraConfig(
        name="ipycam-under-test",
        model="VirtualCam-1",
        local_ip=a.ip,
        onvif_port=port,
        rtsp_port=a.rtsp_port,
        main_stream_name=a.main,
        sub_stream_name=a.sub,
        username=a.user,
        password=a.password,
    )
    ptz = PTZController(output_width=config.main_width, output_height=config.main_height)
    onvif = ONVIFService(config, ptz)
    IPCameraHTTPHandler.camera = Camera(config, onvif, ptz)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    if a.discovery:
        WSDiscoveryServer(onvif).start()
    print(f"ready {port}", flush=True)
    sys.stdin.read()
    http.shutdown()


if __name__ == "__main__":
    main()
