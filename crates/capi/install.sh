#!/usr/bin/env bash
# Builds the workspace as `cargo build --release` does (libtitus with it) and installs,
# under PREFIX:
#   include/titus.h, include/titus_mpi.h     the C headers
#   include/titus.mod, include/titus.f90     the Fortran module (if a Fortran compiler is found)
#   lib/libtitus.so, lib/libtitus.a          the shared and the static library
#   lib/libtitusf.a                          the module's own procedures (Fortran users)
#   lib/pkgconfig/titus.pc                   pkg-config: cflags, libs (--static: libs.private)
#   lib/cmake/Titus/TitusConfig*.cmake       CMake: find_package(Titus) → Titus::titus,
#                                            Titus::fortran (the module, when built)
#
# Usage: crates/capi/install.sh PREFIX        e.g. $HOME/.local or /opt/titus (Linux: .so)
# Environment: FC (Fortran compiler, default gfortran), TITUS_PROFILE (cargo profile, default
# release), CARGO_TARGET_DIR, CARGO_FLAGS.
# Then: cc app.c $(PKG_CONFIG_PATH=PREFIX/lib/pkgconfig pkg-config --cflags --libs titus),
# or in CMake: find_package(Titus) (CMAKE_PREFIX_PATH=PREFIX) and link Titus::titus.
set -euo pipefail
unset CDPATH
if [ $# -ne 1 ] || [ -z "$1" ] || [ "${1#-}" != "$1" ]; then
  echo "usage: $0 PREFIX   (installs libtitus, titus.h, titus.pc and the Fortran module under PREFIX)" >&2
  exit 2
fi
mkdir -p "$1"
prefix="$(cd "$1" && pwd)"
here="$(cd "$(dirname "$0")" && pwd)"
root="$(cd "$here/../.." && pwd)"
# TITUS_PROFILE: the cargo profile (release; the tests use their own, test, to reuse its build).
profile="${TITUS_PROFILE:-release}"
case "$profile" in
  release) dir=release ;;
  dev|test) dir=debug ;;
  *) dir="$profile" ;;
esac
target="${CARGO_TARGET_DIR:-$root/target}/$dir"

# The same build as `cargo build --release` in the repository (every default member, so
# the same features of every dependency): running one after the other rebuilds and relinks
# nothing. Building titus-capi alone (-p) would unify the dependencies' features over its
# own graph only, giving them (and libtitus) other hashes than the workspace build's.
# shellcheck disable=SC2086
(cd "$root" && cargo build --profile "$profile" --locked ${CARGO_FLAGS:-})
version="$(sed -n 's/^version = "\(.*\)"/\1/p' "$root/Cargo.toml" | head -n 1)"

mkdir -p "$prefix/include" "$prefix/lib/pkgconfig" "$prefix/lib/cmake/Titus"
install -m 0644 "$here/include/titus.h" "$here/include/titus_mpi.h" "$prefix/include/"
install -m 0755 "$target/libtitus.so" "$prefix/lib/"
install -m 0644 "$target/libtitus.a" "$prefix/lib/"

fortran=""
fc="${FC:-gfortran}"
if command -v "$fc" >/dev/null 2>&1; then
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  install -m 0644 "$here/fortran/titus.f90" "$prefix/include/"
  # Compiled in the scratch directory, where every compiler writes its .mod by default.
  (cd "$tmp" && "$fc" -O2 -fPIC -c "$here/fortran/titus.f90" -o titus_f.o)
  install -m 0644 "$tmp/titus.mod" "$prefix/include/"
  rm -f "$prefix/lib/libtitusf.a"
  ar rcs "$prefix/lib/libtitusf.a" "$tmp/titus_f.o"
  fortran="-ltitusf "
else
  echo "install.sh: no Fortran compiler ($fc): the Fortran module is not built (set FC)" >&2
fi

# What the static library needs (rustc's native-static-libs on Linux) and libpmix shared
# (only where the build found it: without it, nothing refers to it). Not libfabric: the
# library loads it when a libfabric provider is first used (dlopen: -ldl).
pmix_libs="$(pkg-config --libs pmix 2>/dev/null || true)"
static_libs="$pmix_libs -lgcc_s -lutil -lrt -lpthread -lm -ldl -lc"
sed -e "s|@PREFIX@|$prefix|" -e "s|@VERSION@|$version|" -e "s|@STATIC_LIBS@|$static_libs|" \
    -e "s|-ltitus$|${fortran}-ltitus|" \
    "$here/titus.pc.in" > "$prefix/lib/pkgconfig/titus.pc"
for f in TitusConfig.cmake TitusConfigVersion.cmake; do
  sed -e "s|@VERSION@|$version|" -e "s|@STATIC_LIBS@|$static_libs|" \
      "$here/cmake/$f.in" > "$prefix/lib/cmake/Titus/$f"
done
echo "installed libtitus $version under $prefix"
echo "  pkg-config: PKG_CONFIG_PATH=$prefix/lib/pkgconfig pkg-config --cflags --libs titus"
echo "  CMake: find_package(Titus) with -DCMAKE_PREFIX_PATH=$prefix; link Titus::titus or Titus::titus_static (Fortran: Titus::fortran)"
