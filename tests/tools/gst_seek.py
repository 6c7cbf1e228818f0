#!/usr/bin/python3
"""GStreamer's seek with a stop position, for the end-to-end tests (gst-launch cannot seek).

Plays an RTSP URL with rtspsrc over TCP (timestamps from RTP alone: `buffer-mode=none`) into
avdec_h264, and once the first frame reached the sink, seeks to [START, STOP) seconds
(rtspsrc sends PAUSE, then PLAY with `Range: npt=START-STOP`). Prints what the sink saw
after the seek, one `key=value` a line: frames, first_pts and last_pts (seconds), eos (1 if
the stream ended by itself), errors, and pts (every frame's, in the order the sink saw them).

usage: gst_seek.py URL START STOP TIMEOUT_SECS
"""
import sys

import gi

gi.require_version("Gst", "1.0")
from gi.repository import GLib, Gst  # noqa: E402

url, start, stop, timeout = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), float(sys.argv[4])
Gst.init(None)
pipe = Gst.parse_launch(
    f'rtspsrc name=src location="{url}" protocols=tcp latency=200 buffer-mode=none '
    "! rtph264depay ! h264parse ! avdec_h264 ! fakesink name=sink sync=false"
)
loop = GLib.MainLoop()
state = {"seeked": False, "flushed": False, "frames": 0, "pts": [], "eos": 0, "errors": []}


def seek():
    ok = pipe.seek(
        1.0,
        Gst.Format.TIME,
        Gst.SeekFlags.FLUSH,
        Gst.SeekType.SET,
        int(start * Gst.SECOND),
        Gst.SeekType.SET,
        int(stop * Gst.SECOND),
    )
    if not ok:
        state["errors"].append("seek refused")
        loop.quit()
    return False


def probe(pad, info):
    if info.type & Gst.PadProbeType.BUFFER:
        if not state["seeked"]:
            state["seeked"] = True
            GLib.idle_add(seek)
        elif state["flushed"]:
            state["frames"] += 1
            state["pts"].append(info.get_buffer().pts)
    elif info.type & Gst.PadProbeType.EVENT_BOTH:
        if info.get_event().type == Gst.EventType.FLUSH_STOP and state["seeked"]:
            state["flushed"] = True
            state["frames"] = 0
            state["pts"] = []
    return Gst.PadProbeReturn.OK


pipe.get_by_name("sink").get_static_pad("sink").add_probe(
    Gst.PadProbeType.BUFFER | Gst.PadProbeType.EVENT_BOTH | Gst.PadProbeType.EVENT_FLUSH, probe
)


def on_message(_bus, msg):
    if msg.type == Gst.MessageType.EOS:
        state["eos"] = 1
        loop.quit()
    elif msg.type == Gst.MessageType.ERROR:
        err, dbg = msg.parse_error()
        state["errors"].append(f"{err.message} ({dbg})")
        loop.quit()


bus = pipe.get_bus()
bus.add_signal_watch()
bus.connect("message", on_message)
GLib.timeout_add(int(timeout * 1000), loop.quit)
pipe.set_state(Gst.State.PLAYING)
loop.run()
pipe.set_state(Gst.State.NULL)
pts = [p / Gst.SECOND for p in state["pts"] if p != Gst.CLOCK_TIME_NONE]
print(f"frames={state['frames']}")
print(f"first_pts={min(pts) if pts else -1:.3f}")
print(f"last_pts={max(pts) if pts else -1:.3f}")
print(f"eos={state['eos']}")
print("errors=" + " | ".join(state["errors"]))
print("pts=" + ",".join(f"{p:.3f}" for p in pts))
