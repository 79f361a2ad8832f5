# SH_WITH_SLURM
# --with-slurm[=PREFIX]: where Slurm's headers (slurm/spank.h, slurm/slurm.h)
# and libslurm live. Defines SLURM_CPPFLAGS, SLURM_LDFLAGS, SLURM_LIBS and
# slurmplugindir (where the SPANK plugin is installed: found, see below).
AC_DEFUN([SH_WITH_SLURM], [
  AC_ARG_WITH([slurm],
    [AS_HELP_STRING([--with-slurm=PREFIX], [Slurm installation prefix (default: /usr)])],
    [sh_slurm_prefix="$withval"], [sh_slurm_prefix=/usr])
  AS_IF([test "x$sh_slurm_prefix" = xno],
    [AC_MSG_ERROR([stagehand is a Slurm add-on; --without-slurm is not supported])])
  AS_IF([test "x$sh_slurm_prefix" = xyes], [sh_slurm_prefix=/usr])
  SLURM_CPPFLAGS=""
  SLURM_LDFLAGS=""
  AS_IF([test "x$sh_slurm_prefix" != x/usr], [
    SLURM_CPPFLAGS="-I$sh_slurm_prefix/include"
    SLURM_LDFLAGS="-L$sh_slurm_prefix/lib -L$sh_slurm_prefix/lib64"
  ])
  sh_save_CPPFLAGS="$CPPFLAGS"; sh_save_LDFLAGS="$LDFLAGS"
  CPPFLAGS="$CPPFLAGS $SLURM_CPPFLAGS"; LDFLAGS="$LDFLAGS $SLURM_LDFLAGS"
  AC_CHECK_HEADERS([slurm/spank.h slurm/slurm.h], [],
    [AC_MSG_ERROR([Slurm headers not found under $sh_slurm_prefix; on Debian install libslurm-dev and slurm-wlm-basic-plugins-dev, or pass --with-slurm=PREFIX])])
  AC_CHECK_LIB([slurm], [slurm_load_jobs], [SLURM_LIBS="-lslurm"],
    [AC_MSG_ERROR([libslurm not found under $sh_slurm_prefix; on Debian install libslurm-dev])])
  # The release the plugin is built for (slurmd loads it only into that
  # release): recorded in the plugin for 'stagehand doctor', and in
  # SLURM_RELEASE for the packages.
  AC_COMPUTE_INT([sh_slurm_version_num], [SLURM_VERSION_NUMBER], [#include <slurm/slurm_version.h>],
    [AC_MSG_ERROR([cannot read SLURM_VERSION_NUMBER from slurm/slurm_version.h])])
  SLURM_RELEASE=`printf '%02d.%02d' $((sh_slurm_version_num >> 16)) $(((sh_slurm_version_num >> 8) & 255))`
  AC_MSG_NOTICE([building for Slurm $SLURM_RELEASE])
  AC_DEFINE_UNQUOTED([STAGEHAND_SLURM_RELEASE], ["$SLURM_RELEASE"],
    [Slurm release (MAJ.MIN) the plugin and daemon are built against])
  AC_SUBST([SLURM_RELEASE])
  CPPFLAGS="$sh_save_CPPFLAGS"; LDFLAGS="$sh_save_LDFLAGS"
  # Where stagehand.so goes: where the slurmd of the Slurm built against
  # loads its plugins, not ${libdir}/slurm (with the default prefix that is
  # /usr/local/lib/slurm, where no distribution's slurmd looks). In order:
  # --with-slurm-plugindir; the directory of that Slurm's own plugins (one
  # holding auth_munge.so or job_submit_lua.so) beside its libslurm, or
  # beside the libdir its slurm.pc names; PluginDir of 'scontrol show
  # config'; else ${libdir}/slurm, with a warning.
  AC_ARG_WITH([slurm-plugindir],
    [AS_HELP_STRING([--with-slurm-plugindir=DIR], [where to install stagehand.so (default: the plugin directory of the Slurm built against, found beside its libslurm or from scontrol show config PluginDir; else LIBDIR/slurm)])],
    [slurmplugindir="$withval"; sh_plugindir_why="--with-slurm-plugindir"], [slurmplugindir=""])
  AS_IF([test "x$slurmplugindir" = xyes || test "x$slurmplugindir" = xno],
    [AC_MSG_ERROR([--with-slurm-plugindir needs a directory, e.g. --with-slurm-plugindir=/usr/lib/x86_64-linux-gnu/slurm-wlm])])
  AS_IF([test "x$slurmplugindir" = x], [
    AC_MSG_CHECKING([for the plugin directory of the Slurm built against])
    sh_libslurm=`$CC $CFLAGS $SLURM_LDFLAGS -print-file-name=libslurm.so 2>/dev/null`
    sh_libdirs=""
    AS_CASE([$sh_libslurm], [/*], [sh_libdirs=`cd "\`dirname "$sh_libslurm"\`" 2>/dev/null && pwd -P`])
    AS_IF([test "x$sh_slurm_prefix" != x/usr],
      [sh_libdirs="$sh_libdirs $sh_slurm_prefix/lib $sh_slurm_prefix/lib64"])
    sh_pc_libdir=`${PKG_CONFIG:-pkg-config} --variable=libdir slurm 2>/dev/null`
    AS_IF([test "x$sh_pc_libdir" != x], [sh_libdirs="$sh_libdirs $sh_pc_libdir"])
    for sh_d in $sh_libdirs; do
      for sh_sub in slurm-wlm slurm; do
        AS_IF([test "x$slurmplugindir" = x && { test -f "$sh_d/$sh_sub/auth_munge.so" || test -f "$sh_d/$sh_sub/job_submit_lua.so"; }],
          [slurmplugindir="$sh_d/$sh_sub"; sh_plugindir_why="Slurm's own plugins are there, beside $sh_d/libslurm.so"])
      done
    done
    AS_IF([test "x$slurmplugindir" = x], [
      sh_pd=`scontrol show config 2>/dev/null | sed -n 's/^PluginDir *= *//p' | cut -d: -f1`
      AS_IF([test "x$sh_pd" != x && test -d "$sh_pd"],
        [slurmplugindir="$sh_pd"; sh_plugindir_why="PluginDir of 'scontrol show config'"])
    ])
    AS_IF([test "x$slurmplugindir" = x], [
      slurmplugindir='${libdir}/slurm'
      sh_plugindir_why="no Slurm plugin directory found (looked beside libslurm in:${sh_libdirs:- nowhere}, and in scontrol show config)"
      AC_MSG_RESULT([not found])
      AC_MSG_WARN([stagehand.so will be installed in LIBDIR/slurm, where slurmd may not look: pass --with-slurm-plugindir=DIR, DIR being slurm.conf's PluginDir (scontrol show config | grep PluginDir)])
    ], [AC_MSG_RESULT([$slurmplugindir])])
  ])
  AC_MSG_NOTICE([stagehand.so will be installed in $slurmplugindir: $sh_plugindir_why])
  SLURM_PLUGINDIR_WHY="$sh_plugindir_why"
  AC_SUBST([SLURM_CPPFLAGS]) AC_SUBST([SLURM_LDFLAGS]) AC_SUBST([SLURM_LIBS])
  AC_SUBST([slurmplugindir])
])
