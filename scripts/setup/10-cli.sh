# shellcheck shell=bash
# The command line's documentation and packaging (sourced by scripts/test, which defines apt_install):
#   - man-db (man, with groff-base) and bsdextrautils (col): tests/it/packaging.rs renders the generated man
#     pages with `man -l`, and scripts/check-deb reads the installed ones;
#   - systemd (systemd-analyze): the unit's tests and scripts/check-deb verify the unit;
#   - adduser: the .deb's postinst makes the `agentd` system user with it.
# The bash completion test needs only bash.

apt_install man-db groff-base bsdextrautils systemd adduser
