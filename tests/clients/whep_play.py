#!/usr/bin/env python3
"""A third-party WHEP viewer for the tests: aiortc (PyPI) offers to receive video (and
audio), POSTs the offer to a WHEP URL, decodes N video frames with its own H.264 decoder
(PyAV/FFmpeg), DELETEs the resource, and prints one JSON line: frames decoded, decode
errors, the size, and the milliseconds to the first decoded frame.

With --steps JSON, a recording is steered after the first FRAMES frames, step by step:
{"control": {...}} POSTs a control to the resource's /control (status and answer kept),
{"frames": N} decodes N more (their RTP timestamps kept, 90 kHz), {"idle": S} counts the
frames that arrive in S seconds (none while paused), {"state": true} GETs the control.

usage: whep_play.py URL FRAMES [TIMEOUT_S] [--token T] [--steps JSON]
"""
import asyncio
import json
import logging
import sys
import time
import urllib.error
import urllib.request
from urllib.parse import urljoin

from aiortc import RTCPeerConnection, RTCSessionDescription


class Errors(logging.Handler):
    """Counts what aiortc's decoders log as failures (a corrupt or undecodable frame)."""

    def __init__(self):
        super().__init__(logging.WARNING)
        self.lines = []

    def emit(self, record):
        msg = record.getMessage()
        if "decode" in msg.lower() or "error" in msg.lower():
            self.lines.append(msg)


def http(method, url, body=None, token=None, content_type="application/sdp"):
    req = urllib.request.Request(url, data=body, method=method)
    if body is not None:
        req.add_header("Content-Type", content_type)
    if token:
        req.add_header("Authorization", "Bearer " + token)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, dict(r.headers), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode()


async def steer(track, resource, steps, token, deadline):
    """Runs the steps against a playing recording; one result per step."""
    out = []
    for step in steps:
        if "control" in step:
            body = json.dumps(step["control"]).encode()
            status, _, answer = await asyncio.to_thread(
                http, "POST", resource + "/control", body, token, "application/json")
            out.append({"status": status, "answer": answer})
        elif "state" in step:
            status, _, answer = await asyncio.to_thread(http, "GET", resource + "/control", None, token)
            out.append({"status": status, "answer": answer})
        elif "frames" in step:
            pts = []
            while len(pts) < step["frames"]:
                frame = await asyncio.wait_for(track.recv(), max(0.1, deadline - time.monotonic()))
                pts.append(frame.pts)
            out.append({"pts": pts})
        elif "idle" in step:
            end = time.monotonic() + step["idle"]
            got = 0
            while time.monotonic() < end:
                try:
                    await asyncio.wait_for(track.recv(), max(0.01, end - time.monotonic()))
                    got += 1
                except asyncio.TimeoutError:
                    break
            out.append({"idle_frames": got})
    return out


async def play(url, frames, timeout, token, steps=None):
    errors = Errors()
    logging.getLogger().addHandler(errors)
    pc = RTCPeerConnection()
    pc.addTransceiver("video", direction="recvonly")
    pc.addTransceiver("audio", direction="recvonly")
    got = asyncio.get_event_loop().create_future()

    @pc.on("track")
    def on_track(track):
        if track.kind == "video" and not got.done():
            got.set_result(track)

    await pc.setLocalDescription(await pc.createOffer())
    started = time.monotonic()
    status, headers, answer = http("POST", url, pc.localDescription.sdp.encode(), token)
    redirected = None
    if status == 307:
        # WHEP: the offer goes again to the node the redirect names.
        redirected = next((v for k, v in headers.items() if k.lower() == "location"), "")
        url = urljoin(url, redirected)
        status, headers, answer = http("POST", url, pc.localDescription.sdp.encode(), token)
    if status != 201:
        print(json.dumps({"status": status, "body": answer}))
        await pc.close()
        return
    location = next((v for k, v in headers.items() if k.lower() == "location"), "")
    resource = urljoin(url, location)
    await pc.setRemoteDescription(RTCSessionDescription(sdp=answer, type="answer"))
    out = {"status": status, "resource": resource, "redirected": redirected, "frames": 0, "errors": []}
    try:
        track = await asyncio.wait_for(got, timeout)
        deadline = started + timeout
        while out["frames"] < frames:
            frame = await asyncio.wait_for(track.recv(), max(0.1, deadline - time.monotonic()))
            if out["frames"] == 0:
                out["first_frame_ms"] = round((time.monotonic() - started) * 1000, 1)
                out["size"] = [frame.width, frame.height]
            out["frames"] += 1
        if steps:
            out["steps"] = await steer(track, resource, steps, token, deadline)
    except asyncio.TimeoutError:
        out["timeout"] = True
    out["errors"] = errors.lines
    out["delete"] = http("DELETE", resource, token=token)[0]
    await pc.close()
    print(json.dumps(out))


def main():
    args = sys.argv[1:]
    token = None
    if "--token" in args:
        i = args.index("--token")
        token = args[i + 1]
        del args[i : i + 2]
    steps = None
    if "--steps" in args:
        i = args.index("--steps")
        steps = json.loads(args[i + 1])
        del args[i : i + 2]
    url, frames = args[0], int(args[1])
    timeout = float(args[2]) if len(args) > 2 else 30.0
    asyncio.run(play(url, frames, timeout, token, steps))


if __name__ == "__main__":
    main()
