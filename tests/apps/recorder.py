#!/usr/bin/env python3
"""The project's recording test application: a Tk window that writes every input it receives to a log.

Usage: recorder.py LOG   (DISPLAY names the X display)

The window sits at the top-left corner of the screen (960x420+0+0) so that screen coordinates in a test
script are the app's coordinates too. One JSON object per line is appended to LOG and flushed at once:
  {"event": "ready"}                                        the window is mapped
  {"event": "press"|"release", "button": B, "x": X, "y": Y, "state": S, "where": "pad"|"scroll"|"entry"|…}
  {"event": "double", "x": X, "y": Y}  {"event": "triple", "x": X, "y": Y}
  {"event": "motion", "x": X, "y": Y, "buttons": S}        pointer motion while a button is held (drags)
  {"event": "key", "keysym": "Return", "keysym_num": N, "char": "é", "state": S}    key presses
  {"event": "key_release", "keysym": …, "state": S}
  {"event": "text", "value": "…"}                           the entry's content after every change
X and Y are root (screen) coordinates; S is the X modifier state (1 Shift, 4 Control, 8 Mod1/Alt, 64 Mod4).
Tk 8.6 reports X buttons 6 and 7 (horizontal wheel) as buttons 4 and 5 with the Shift bit set in the state.
Widgets: the entry at (10,25)-(610,55), the click pad at (20,100)-(620,400), the scroll pad at
(640,100)-(940,400).
"""
import ctypes
import json
import sys
import tkinter as tk

log = open(sys.argv[1], "a", encoding="utf-8")


def record(**event):
    log.write(json.dumps(event, ensure_ascii=False) + "\n")
    log.flush()


root = tk.Tk()


def keep_every_motion():
    """Tk merges pointer motions that wait in its queue together into the last one (motion compression), so on
    a busy machine a drag's named point can reach no binding although the X server delivered it. The recorder
    must see every motion delivered, so it turns that off through Tk's C API (tkinter does not expose it)."""
    libtk = ctypes.CDLL("libtk%s.so" % tk.TkVersion)
    libtk.Tk_MainWindow.restype = ctypes.c_void_p
    libtk.Tk_MainWindow.argtypes = [ctypes.c_void_p]
    libtk.Tk_CollapseMotionEvents.restype = ctypes.c_int
    libtk.Tk_CollapseMotionEvents.argtypes = [ctypes.c_void_p, ctypes.c_int]
    window = libtk.Tk_MainWindow(root.tk.interpaddr())
    if not window:
        raise SystemExit("recorder: Tk has no main window to turn motion compression off for")
    # Tk_Display(window) is a macro: the display is the first field of every Tk window.
    display = ctypes.c_void_p.from_address(window).value
    libtk.Tk_CollapseMotionEvents(display, 0)
    if libtk.Tk_CollapseMotionEvents(display, 0) != 0:
        raise SystemExit("recorder: Tk still compresses pointer motion")


keep_every_motion()
root.title("agentd recorder")
root.geometry("960x420+0+0")
root.configure(background="#dddddd")

text = tk.StringVar()
# The caret does not blink (insertofftime 0): the screen of an idle recorder stays the same from one screenshot
# to the next, however far apart they are taken (a blink between two is 48 changed pixels).
entry = tk.Entry(root, textvariable=text, font=("DejaVu Sans", 14), insertofftime=0)
entry.place(x=10, y=25, width=600, height=30)
text.trace_add("write", lambda *_: record(event="text", value=text.get()))

pad = tk.Canvas(root, background="#ffffff", highlightthickness=0)
pad.place(x=20, y=100, width=600, height=300)
pad.create_text(300, 150, text="click / drag pad")
scroll = tk.Canvas(root, background="#eeeeff", highlightthickness=0)
scroll.place(x=640, y=100, width=300, height=300)
scroll.create_text(150, 150, text="scroll pad")

names = {pad: "pad", scroll: "scroll", entry: "entry"}


def where(widget):
    return names.get(widget, str(widget))


def on_press(e):
    record(event="press", button=e.num, x=e.x_root, y=e.y_root, state=e.state, where=where(e.widget))


def on_release(e):
    record(event="release", button=e.num, x=e.x_root, y=e.y_root, state=e.state, where=where(e.widget))


def on_motion(e):
    # Bits 8.. of the state are the buttons held (Button1Mask = 256).
    if e.state & (256 | 512 | 1024):
        record(event="motion", x=e.x_root, y=e.y_root, buttons=e.state >> 8, state=e.state & 0xff)


# Bindings on the toplevel see the events of every widget inside it (Tk's bindtags), once each.
root.bind("<ButtonPress>", on_press, add="+")
root.bind("<ButtonRelease>", on_release, add="+")
root.bind("<Motion>", on_motion, add="+")
pad.bind("<Double-Button-1>", lambda e: record(event="double", x=e.x_root, y=e.y_root), add="+")
pad.bind("<Triple-Button-1>", lambda e: record(event="triple", x=e.x_root, y=e.y_root), add="+")
# Keys through a binding tag of their own, first on every widget: Tk runs only the most specific binding
# within one tag, and the "all" tag has <Alt-Key> (menu traversal) and <<PrevWindow>> (Shift+Tab), which would
# hide those presses from a <KeyPress> binding there.
for widget in (root, entry, pad, scroll):
    widget.bindtags(("recorder",) + widget.bindtags())
root.bind_class(
    "recorder",
    "<KeyPress>",
    lambda e: record(event="key", keysym=e.keysym, keysym_num=e.keysym_num, char=e.char, state=e.state),
)
root.bind_class(
    "recorder",
    "<KeyRelease>",
    lambda e: record(event="key_release", keysym=e.keysym, state=e.state),
)


def ready():
    root.update_idletasks()
    entry.focus_force()
    record(event="ready")


root.after(200, ready)
root.mainloop()
