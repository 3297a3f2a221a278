# shellcheck shell=bash
# Real desktops for the local and VNC provider tests (sourced by scripts/test, which defines apt_install
# and on_exit). Starts, on displays and ports the servers choose or that are free:
#   - Xvfb (1280x800, -noreset)                 AGENTD_TEST_DISPLAY           the local provider's screen
#   - Xvfb + x11vnc, no password                AGENTD_TEST_VNC_ADDR          host:port
#                                               AGENTD_TEST_VNC_DISPLAY       the X display x11vnc serves
#   - TigerVNC Xvnc, VNC authentication         AGENTD_TEST_XVNC_ADDR         host:port
#                                               AGENTD_TEST_XVNC_DISPLAY      Xvnc's own X display
#                                               AGENTD_TEST_VNC_PASSWORD_FILE the plain password
# Every server is stopped on exit. A server that does not start stops the run (set -e); tests that need one of
# these and do not find its variable skip (fail under CI).

apt_install xvfb x11vnc tigervnc-standalone-server x11-utils x11-xserver-utils python3-tk
# Building the portable provider (providers/portable, a workspace member): xcap links libpipewire (its Wayland
# capture) and generates bindings with libclang; enigo links libxkbcommon.
apt_install libpipewire-0.3-dev libclang-dev libgbm-dev libwayland-dev libxkbcommon-dev pkg-config

DESKTOPS_DIR="$(mktemp -d "${TMPDIR:-/tmp}/agentd-desktops.XXXXXX")"
on_exit "rm -rf '$DESKTOPS_DIR'"

# Starts an X server (Xvfb or Xvnc) with -displayfd and stores the display it chose (":N") in the variable
# named by $2. (No command substitution: on_exit must run in this shell, not in a subshell.)
desktops_start_x() {
  local name="$1" var="$2"; shift 2
  local fdfile="$DESKTOPS_DIR/$name.display"
  "$@" -displayfd 3 -noreset -nolisten tcp 3>"$fdfile" >"$DESKTOPS_DIR/$name.log" 2>&1 &
  on_exit "kill $! 2>/dev/null"
  local i
  for i in $(seq 1 100); do
    [ -s "$fdfile" ] && break
    sleep 0.1
  done
  local number
  number="$(head -n1 "$fdfile" 2>/dev/null)"
  if [ -z "$number" ] || ! DISPLAY=":$number" xdpyinfo >/dev/null 2>&1; then
    echo "$name did not start:" >&2
    cat "$DESKTOPS_DIR/$name.log" >&2
    return 1
  fi
  printf -v "$var" ':%s' "$number"
  export "${var?}"
}

desktops_free_port() {
  python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

desktops_wait_port() {
  local i
  for i in $(seq 1 100); do
    (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
    sleep 0.1
  done
  echo "nothing listens on port $1" >&2
  return 1
}

desktops_start_x xvfb-local AGENTD_TEST_DISPLAY Xvfb -screen 0 1280x800x24

desktops_start_x xvfb-vnc AGENTD_TEST_VNC_DISPLAY Xvfb -screen 0 1280x800x24
desktops_vnc_port="$(desktops_free_port)"
# -add_keysyms: without it x11vnc drops keysyms its keyboard layout lacks (é, €).
x11vnc -display "$AGENTD_TEST_VNC_DISPLAY" -rfbport "$desktops_vnc_port" -localhost -forever -shared \
  -nopw -quiet -noxrecord -add_keysyms >"$DESKTOPS_DIR/x11vnc.log" 2>&1 &
on_exit "kill $! 2>/dev/null"
desktops_wait_port "$desktops_vnc_port"
export AGENTD_TEST_VNC_ADDR="127.0.0.1:$desktops_vnc_port"

AGENTD_TEST_VNC_PASSWORD_FILE="$DESKTOPS_DIR/vnc-password"
(umask 077; head -c 32 /dev/urandom | base64 | tr -dc 'A-Za-z0-9' | head -c 8 >"$AGENTD_TEST_VNC_PASSWORD_FILE")
export AGENTD_TEST_VNC_PASSWORD_FILE
x11vnc -storepasswd "$(cat "$AGENTD_TEST_VNC_PASSWORD_FILE")" "$DESKTOPS_DIR/vncpasswd" >/dev/null 2>&1
desktops_xvnc_port="$(desktops_free_port)"
# A high blacklist threshold: the wrong-password tests must not lock out the other tests' connections.
desktops_start_x xvnc AGENTD_TEST_XVNC_DISPLAY Xvnc -geometry 1280x800 -depth 24 \
  -rfbport "$desktops_xvnc_port" -localhost -AlwaysShared -SecurityTypes VncAuth \
  -PasswordFile "$DESKTOPS_DIR/vncpasswd" -BlacklistThreshold 1000000
desktops_wait_port "$desktops_xvnc_port"
export AGENTD_TEST_XVNC_ADDR="127.0.0.1:$desktops_xvnc_port"

echo "desktops: local $AGENTD_TEST_DISPLAY, x11vnc $AGENTD_TEST_VNC_ADDR on $AGENTD_TEST_VNC_DISPLAY," \
  "Xvnc $AGENTD_TEST_XVNC_ADDR ($AGENTD_TEST_XVNC_DISPLAY)" >&2
