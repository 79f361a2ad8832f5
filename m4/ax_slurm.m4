# SH_WITH_SLURM
# --with-slurm[=PREFIX]: where Slurm's headers (slurm/spank.h, slurm/slurm.h)
# and libslurm live. Defines SLURM_CPPFLAGS, SLURM_LDFLAGS, SLURM_LIBS and
# slurmplugindir (where the SPANK plugin is installed).
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
  AC_ARG_WITH([slurm-plugindir],
    [AS_HELP_STRING([--with-slurm-plugindir=DIR], [where to install stagehand.so (default: LIBDIR/slurm)])],
    [slurmplugindir="$withval"], [slurmplugindir='${libdir}/slurm'])
  AC_SUBST([SLURM_CPPFLAGS]) AC_SUBST([SLURM_LDFLAGS]) AC_SUBST([SLURM_LIBS])
  AC_SUBST([slurmplugindir])
])
