#!/usr/bin/env bash
# Real GPU compilers on a machine without a GPU (docs/gpu_compilers.md says what they report):
#   tools/gpu-compilers.sh prepare       fetch Debian's Mesa 25 (AMD's RADV, Intel's ANV) and build
#                                        Mesa's no-op Intel DRM shim into the cache; a second call
#                                        finds everything in place and does nothing
#   tools/gpu-compilers.sh env TARGET    print the `export` lines that make the Vulkan loader show
#                                        TARGET (exit 1, saying why, where it is not ready here)
#   tools/gpu-compilers.sh targets       every target and whether it is ready here
# The cache is ${RELPOS_GPU_COMPILERS_DIR:-${XDG_CACHE_HOME:-~/.cache}/relpos/gpu-compilers}.
# Nothing is installed over the system's Mesa: lavapipe stays what the tests run on. Debian's
# packages are fetched by apt with a private configuration (its own sources list, package lists
# and archives, in a work folder that is removed afterwards; the system's apt sources are never
# touched) and unpacked with `dpkg-deb -x`. Building the shim installs Debian 12's bison, flex and
# python3-mako if missing (apt, as root or through sudo), like .ci/install-deps.
set -euo pipefail

cache=${RELPOS_GPU_COMPILERS_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/relpos/gpu-compilers}
mesa25="$cache/mesa25"
# The Mesa 25 whose figures docs/gpu_compilers.md records; where bookworm-backports has moved on,
# prepare takes its newer Mesa and says so.
mesa25_version=25.0.7-2~bpo12+1
recipe=1  # bump when the cache's layout changes: a prepared cache of another recipe is rebuilt
system_icd=/usr/share/vulkan/icd.d/radeon_icd.x86_64.json

amd_system=(navi10 navi21 vega10)
amd_mesa25=(navi31 navi21-mesa25)
intel=(dg2 bmg lnl tgl)

say() { echo "gpu-compilers: $*" >&2; }
die() { say "$*"; exit 1; }

ready() {
  [ -f "$mesa25/READY" ] && [ "$(cat "$mesa25/READY")" = "$recipe" ] &&
    [ -f "$mesa25/lib/libvulkan_radeon.so" ] && [ -f "$mesa25/lib/libvulkan_intel.so" ] &&
    [ -f "$mesa25/lib/libintel_noop_drm_shim.so" ] && [ -f "$mesa25/radeon_icd.json" ] && [ -f "$mesa25/intel_icd.json" ]
}

# apt with its own sources list, lists and archives under $work/apt (root or not).
private_apt() {
  local tool=$1
  shift
  "$tool" -q -o Dir::Etc::SourceList="$work/apt/sources.list" -o Dir::Etc::SourceParts="$work/apt/parts" \
    -o Dir::State::Lists="$work/apt/lists" -o Dir::Cache="$work/apt/cache" -o APT::Sandbox::User="$(id -un)" \
    -o Debug::NoLocking=true "$@"
}

install_missing() {  # Debian 12 packages from the system's own sources
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  say "installing ${missing[*]} (to build the shim)"
  local sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  $sudo apt-get update -q >/dev/null
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
}

prepare() {
  mkdir -p "$cache"
  exec 9>"$cache/.lock"
  flock 9  # one prepare at a time
  if ready; then
    say "everything in place in $mesa25 (Mesa $(cat "$mesa25/VERSION"))"
    return 0
  fi
  local start=$SECONDS
  rm -rf "$mesa25" "$cache"/work.*
  work=$(mktemp -d "$cache/work.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work"/apt/{lists/partial,cache/archives/partial,parts} "$work/debs" "$work/tools" "$work/mesa"
  local archive="[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg] http://deb.debian.org/debian bookworm-backports main"
  printf 'deb %s\ndeb-src %s\n' "$archive" "$archive" >"$work/apt/sources.list"
  private_apt apt-get update >/dev/null

  local version=$mesa25_version offered
  offered=$(private_apt apt-cache madison mesa-vulkan-drivers)
  if ! grep -qF "| $version |" <<<"$offered"; then
    version=$(awk -F' [|] ' 'NR == 1 {print $2}' <<<"$offered")
    [ -n "$version" ] || die "bookworm-backports offers no mesa-vulkan-drivers"
    say "bookworm-backports no longer has Mesa $mesa25_version: taking $version (docs/gpu_compilers.md's figures are for $mesa25_version)"
  fi
  # Mesa 25 needs libdrm >= 2.4.121 (bookworm has 2.4.114); meson >= 1.4 builds Mesa 25.
  (cd "$work/debs" && private_apt apt-get download "mesa-vulkan-drivers=$version" libdrm2/bookworm-backports \
    libdrm-amdgpu1/bookworm-backports libdrm-dev/bookworm-backports meson/bookworm-backports >/dev/null)
  # The upstream tarball of Debian's source package, checked against the signed Sources index.
  local uri
  uri=$(private_apt apt-get source --print-uris "mesa=$version" | grep -E "'[^']*\.orig\.tar\.xz'")
  read -r url file _ hash <<<"$uri"
  url=${url//\'/}
  /usr/lib/apt/apt-helper -o APT::Sandbox::User="$(id -un)" download-file "$url" "$work/$file" "$hash" >/dev/null

  for deb in "$work"/debs/mesa-vulkan-drivers_*.deb "$work"/debs/libdrm2_*.deb "$work"/debs/libdrm-amdgpu1_*.deb; do
    dpkg-deb -x "$deb" "$work/mesa"
  done
  local lib=usr/lib/x86_64-linux-gnu
  mkdir -p "$mesa25/lib"
  cp -a "$work/mesa/$lib"/{libvulkan_radeon.so,libvulkan_intel.so,libdrm.so.2*,libdrm_amdgpu.so.1*} "$mesa25/lib/"
  for driver in radeon intel; do
    printf '{\n  "file_format_version": "1.0.0",\n  "ICD": {"library_path": "%s", "api_version": "1.4.305"}\n}\n' \
      "$mesa25/lib/libvulkan_$driver.so" >"$mesa25/${driver}_icd.json"
  done

  # Intel's no-op DRM shim (src/intel/tools/intel_noop_drm_shim.c): only it is built; the ANV that
  # runs is Debian's binary. intel_hasvk because -Dvulkan-drivers=intel wants libclc.
  install_missing bison flex python3-mako pkg-config ninja-build gcc g++ libexpat1-dev zlib1g-dev
  for deb in "$work"/debs/meson_*.deb "$work"/debs/libdrm*.deb; do dpkg-deb -x "$deb" "$work/tools"; done
  sed -i "s|^prefix=/usr\$|prefix=$work/tools/usr|" "$work/tools/$lib"/pkgconfig/*.pc
  tar -xJf "$work/$file" -C "$work"
  local src
  src=$(find "$work" -maxdepth 1 -type d -name 'mesa-*' | head -1)
  # Meson must run on Debian's python3 (with mako), not another python first on PATH.
  local build_env=(env "PATH=/usr/bin:$PATH" "PYTHONPATH=$work/tools/usr/lib/python3/dist-packages"
                   "PKG_CONFIG_PATH=$work/tools/$lib/pkgconfig")
  (cd "$src" && "${build_env[@]}" /usr/bin/python3 "$work/tools/usr/bin/meson" setup "$work/shim" \
    -Dvulkan-drivers=intel_hasvk -Dgallium-drivers= -Dplatforms= -Dglx=disabled -Degl=disabled -Dgbm=disabled \
    -Dllvm=disabled -Dtools=drm-shim,intel -Dbuildtype=release -Dvideo-codecs= -Dzstd=disabled -Dopengl=false \
    -Dgles1=disabled -Dgles2=disabled >"$work/meson.log" 2>&1) || { tail -20 "$work/meson.log" >&2; die "meson setup failed"; }
  "${build_env[@]}" ninja -C "$work/shim" -j "$(nproc)" src/intel/tools/libintel_noop_drm_shim.so >"$work/ninja.log" 2>&1 ||
    { tail -20 "$work/ninja.log" >&2; die "building the shim failed"; }
  cp "$work/shim/src/intel/tools/libintel_noop_drm_shim.so" "$mesa25/lib/"

  echo "$version" >"$mesa25/VERSION"
  echo "$recipe" >"$mesa25/READY"
  say "prepared Mesa $version in $mesa25 in $((SECONDS - start)) s"
}

# One shell-quoted value.
quote() { printf "'%s'" "${1//\'/\'\\\'\'}"; }

env_of() {
  local target=$1
  case " ${amd_system[*]} " in
    *" $target "*)
      [ -f "$system_icd" ] || die "$target: no radeon ICD ($system_icd): install mesa-vulkan-drivers"
      echo "export VK_ICD_FILENAMES=$(quote "$system_icd")"
      echo "export RADV_FORCE_FAMILY=$target"
      return 0 ;;
  esac
  local is_amd=0 is_intel=0
  case " ${amd_mesa25[*]} " in *" $target "*) is_amd=1 ;; esac
  case " ${intel[*]} " in *" $target "*) is_intel=1 ;; esac
  [ $((is_amd + is_intel)) -eq 1 ] ||
    { say "unknown target '$target': one of ${amd_system[*]} ${amd_mesa25[*]} ${intel[*]}"; exit 2; }
  ready || die "$target needs Mesa 25, not prepared in $cache: run tools/gpu-compilers.sh prepare"
  echo "export LD_LIBRARY_PATH=$(quote "$mesa25/lib")\${LD_LIBRARY_PATH:+\":\$LD_LIBRARY_PATH\"}"
  if [ $is_amd -eq 1 ]; then
    echo "export VK_ICD_FILENAMES=$(quote "$mesa25/radeon_icd.json")"
    echo "export RADV_FORCE_FAMILY=${target%-mesa25}"
  else
    echo "export VK_ICD_FILENAMES=$(quote "$mesa25/intel_icd.json")"
    echo "export LD_PRELOAD=$(quote "$mesa25/lib/libintel_noop_drm_shim.so")"
    echo "export INTEL_STUB_GPU_PLATFORM=$target"
  fi
}

case "${1:-}" in
  prepare) prepare ;;
  env)
    [ $# -eq 2 ] || { say "usage: $0 env TARGET"; exit 2; }
    env_of "$2" ;;
  targets)
    for t in "${amd_system[@]}" "${amd_mesa25[@]}" "${intel[@]}"; do
      if reason=$(env_of "$t" 2>&1 >/dev/null); then echo "$t ready"; else echo "$t ${reason#gpu-compilers: }"; fi
    done ;;
  *) say "usage: $0 prepare | env TARGET | targets"; exit 2 ;;
esac
