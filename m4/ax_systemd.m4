# SH_WITH_SYSTEMDUNITDIR
# --with-systemdunitdir=DIR: where to install stagehandd.service
# (default: from systemd.pc, else PREFIX/lib/systemd/system).
AC_DEFUN([SH_WITH_SYSTEMDUNITDIR], [
  AC_ARG_WITH([systemdunitdir],
    [AS_HELP_STRING([--with-systemdunitdir=DIR], [systemd unit directory])],
    [systemdunitdir="$withval"], [systemdunitdir='${prefix}/lib/systemd/system'])
  AC_SUBST([systemdunitdir])
])
