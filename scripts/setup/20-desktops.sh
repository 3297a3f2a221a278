# shellcheck shell=bash
# Real desktops for the local and VNC provider tests (sourced by scripts/test, which defines apt_install
# and on_exit). Installs Xvfb, x11vnc, TigerVNC's Xvnc, Tk (the recording app) and the portable provider's
# build libraries, and starts one Xvfb (1280x800, -noreset) whose display it exports as AGENTD_TEST_DISPLAY:
# the sign for the tests that X is here. Tests that type or click start X and VNC servers of their own
# (agentd_local::testing); tests that need X and do not find the variable skip (fail under CI).

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

desktops_start_x xvfb-local AGENTD_TEST_DISPLAY Xvfb -screen 0 1280x800x24

# The VNC servers every VNC test starts for itself (a server shared by the whole run would carry the spare
# keycodes one test's typing borrowed into the next test): both must run here.
x11vnc -version >/dev/null 2>&1 || { echo "x11vnc does not run" >&2; return 1; }
Xvnc -version >/dev/null 2>&1 || { echo "Xvnc does not run" >&2; return 1; }

echo "desktops: Xvfb $AGENTD_TEST_DISPLAY; x11vnc and Xvnc installed" >&2
