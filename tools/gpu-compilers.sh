#!/usr/bin/env bash
# Real GPU compilers on a machine without a GPU (docs/gpu_compilers.md says what they report):
#   tools/gpu-compilers.sh prepare       fetch Debian's Mesa 25 (AMD's RADV, Intel's ANV) and build
#                                        Mesa's no-op Intel DRM shim into the cache; a second call
#                                        finds everything in place and does nothing
#   tools/gpu-compilers.sh prepare --nvidia   also build NVK and the nouveau shim (~30 min)
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
nvk="$cache/nvk"
# The Mesa 25 whose figures docs/gpu_compilers.md records; where bookworm-backports has moved on,
# prepare takes its newer Mesa and says so.
mesa25_version=25.0.7-2~bpo12+1
recipe=1  # bump when the cache's layout changes: a prepared cache of another recipe is rebuilt
system_icd=/usr/share/vulkan/icd.d/radeon_icd.x86_64.json

amd_system=(navi10 navi21 vega10)
amd_mesa25=(navi31 navi21-mesa25)
intel=(dg2 bmg lnl tgl)
nvidia=(turing ampere)

say() { echo "gpu-compilers: $*" >&2; }
die() { say "$*"; exit 1; }

ready() {
  [ -f "$mesa25/READY" ] && [ "$(cat "$mesa25/READY")" = "$recipe" ] &&
    [ -f "$mesa25/lib/libvulkan_radeon.so" ] && [ -f "$mesa25/lib/libvulkan_intel.so" ] &&
    [ -f "$mesa25/lib/libintel_noop_drm_shim.so" ] && [ -f "$mesa25/radeon_icd.json" ] && [ -f "$mesa25/intel_icd.json" ]
}

# apt with its own sources list, lists and archives under ${apt_dir:-$work/apt} (root or not).
private_apt() {
  local tool=$1 dir=${apt_dir:-$work/apt}
  shift
  "$tool" -q -o Dir::Etc::SourceList="$dir/sources.list" -o Dir::Etc::SourceParts="$dir/parts" \
    -o Dir::State::Lists="$dir/lists" -o Dir::Cache="$dir/cache" -o APT::Sandbox::User="$(id -un)" \
    -o Debug::NoLocking=true "$@"
}

# A private apt folder for `suites` (lines of "suite" or "deb-src suite"), updated.
new_apt() {
  local dir=$1
  shift
  mkdir -p "$dir"/{lists/partial,cache/archives/partial,parts}
  local key="[signed-by=/usr/share/keyrings/debian-archive-keyring.gpg]"
  for suite in "$@"; do
    case "$suite" in
      deb-src\ *) echo "deb-src $key http://deb.debian.org/debian ${suite#deb-src } main" ;;
      *) echo "deb $key http://deb.debian.org/debian $suite main" ;;
    esac
  done >"$dir/sources.list"
  apt_dir=$dir private_apt apt-get update >/dev/null
}

# The upstream tarball of Debian's Mesa source package `version`, checked against the signed
# Sources index, unpacked into $work; prints the source folder.
mesa_source() {
  local version=$1 uri url file hash
  uri=$(private_apt apt-get source --print-uris "mesa=$version" | grep -E "'[^']*\.orig\.tar\.xz'")
  read -r url file _ hash <<<"$uri"
  url=${url//\'/}
  /usr/lib/apt/apt-helper -o APT::Sandbox::User="$(id -un)" download-file "$url" "$work/$file" "$hash" >/dev/null
  tar -xJf "$work/$file" -C "$work"
  find "$work" -maxdepth 1 -type d -name 'mesa-*' | head -1
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
    [ "${1:-}" = --nvidia ] && prepare_nvidia
    return 0
  fi
  local start=$SECONDS
  rm -rf "$mesa25" "$cache"/work.*
  work=$(mktemp -d "$cache/work.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  mkdir -p "$work/debs" "$work/tools" "$work/mesa"
  new_apt "$work/apt" bookworm-backports "deb-src bookworm-backports"

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
  local src
  src=$(mesa_source "$version")
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
  rm -rf "$work"
  if [ "${1:-}" = --nvidia ]; then prepare_nvidia; fi
}

# NVIDIA's compiler: NVK (Mesa's NVIDIA Vulkan driver, whose compiler NAK is written in Rust) and the
# no-op nouveau DRM shim, built from the same Mesa 25 source; Debian's backport ships no NVK. Debian
# 12 has Rust 1.85 (rustc-web) but not what Mesa 25's Rust needs (bindgen >= 0.65, cbindgen >= 0.25,
# syn >= 2): those come from Debian 13's librust-*-dev packages (crate sources), unpacked and built
# offline with Debian 12's cargo-web. Nothing from Debian 13 is installed or run as a binary (its
# binaries need glibc 2.39). About 30 minutes on 2 cores, so only on request (prepare --nvidia).
nvidia_ready() {
  [ -f "$nvk/READY" ] && [ "$(cat "$nvk/READY")" = "$recipe" ] && [ -f "$nvk/lib/libvulkan_nouveau.so" ] &&
    [ -f "$nvk/lib/libnouveau_noop_drm_shim.so" ] && [ -f "$nvk/nouveau_icd.json" ]
}

prepare_nvidia() {
  if nvidia_ready; then
    say "NVK in place in $nvk"
    return 0
  fi
  local start=$SECONDS version
  version=$(cat "$mesa25/VERSION")
  rm -rf "$nvk"
  work=$(mktemp -d "$cache/work.XXXXXX")
  trap 'rm -rf "$work"' EXIT
  new_apt "$work/apt" bookworm bookworm-backports "deb-src bookworm-backports"
  # Debian 13's crates, with everything they depend on, resolved by apt from an empty status.
  apt_dir="$work/apt13"
  new_apt "$work/apt13" trixie
  : >"$work/apt13/status"
  private_apt apt-get -o Dir::State::status="$work/apt13/status" -o APT::Install-Recommends=false install -y --print-uris \
    librust-bindgen-dev librust-cbindgen-dev librust-syn-dev librust-proc-macro2-dev librust-quote-dev librust-paste-dev \
    librust-unicode-ident-dev | grep "^'[^']*/librust-" >"$work/crates.txt"
  unset apt_dir
  mkdir -p "$work/crates" "$work/rust" "$work/tools" "$work/debs"
  while read -r url file _ hash; do
    /usr/lib/apt/apt-helper -o APT::Sandbox::User="$(id -un)" download-file "${url//\'/}" "$work/debs/$file" "$hash" >/dev/null
    dpkg-deb -x "$work/debs/$file" "$work/crates"
    rm "$work/debs/$file"
  done <"$work/crates.txt"
  local registry="$work/crates/usr/share/cargo/registry"
  (cd "$work/debs" && private_apt apt-get download rustc-web/bookworm cargo-web/bookworm libstd-rust-web-dev/bookworm \
    "$(private_apt apt-cache depends libstd-rust-web-dev/bookworm | awk '/Depends: libstd-rust-web-[0-9]/ {print $2; exit}')/bookworm" \
    libllvm19/bookworm libhttp-parser2.9 meson/bookworm-backports libdrm-dev/bookworm-backports libdrm2/bookworm-backports >/dev/null)
  for deb in "$work"/debs/{rustc-web,cargo-web,libstd-rust,libllvm19,libhttp-parser}*.deb; do dpkg-deb -x "$deb" "$work/rust"; done
  for deb in "$work"/debs/{meson,libdrm}*.deb; do dpkg-deb -x "$deb" "$work/tools"; done
  local lib=usr/lib/x86_64-linux-gnu
  sed -i "s|^prefix=/usr\$|prefix=$work/tools/usr|" "$work/tools/$lib"/pkgconfig/*.pc
  install_missing bison flex python3-mako pkg-config ninja-build gcc g++ libexpat1-dev zlib1g-dev glslang-tools \
    libclang1-14 libclang-common-14-dev libssh2-1 libsqlite3-0
  local rust_env=(env "PATH=$work/rust/usr/bin:/usr/bin:$PATH" "LD_LIBRARY_PATH=$work/rust/$lib" "CARGO_HOME=$work/cargo-home"
                  "LIBCLANG_PATH=/usr/lib/llvm-14/lib")
  mkdir -p "$work/cargo-home" "$work/bindgen/src"
  printf '[source.crates-io]\nreplace-with = "debian"\n[source.debian]\ndirectory = "%s"\n[net]\noffline = true\n' "$registry" \
    >"$work/cargo-home/config.toml"
  # bindgen's command line lives in the bindgen crate (feature __cli); this is its whole main.
  printf '[package]\nname = "bindgen-cli"\nversion = "0.1.0"\nedition = "2021"\n[[bin]]\nname = "bindgen"\npath = "src/main.rs"\n[dependencies]\nbindgen = { version = "0.71", features = ["__cli", "runtime", "logging", "prettyplease"] }\n' \
    >"$work/bindgen/Cargo.toml"
  cat >"$work/bindgen/src/main.rs" <<'RS'
fn main() {
    let (builder, output, _) = bindgen::builder_from_flags(std::env::args()).unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1)
    });
    let bindings = builder.generate().unwrap_or_else(|e| {
        eprintln!("{e}");
        std::process::exit(1)
    });
    bindings.write(output).expect("writing the bindings");
}
RS
  # cbindgen's own crate, less its dev-dependencies (test crates Debian 13 does not pull in).
  cp -r "$registry"/cbindgen-0.* "$work/cbindgen"
  /usr/bin/python3 -c 'import re, sys; p = sys.argv[1]; s = open(p).read(); open(p, "w").write(re.sub(r"\n\[dev-dependencies\.[^\]]+\]\n(?:[^\[].*\n|\n)*", "\n", s))' \
    "$work/cbindgen/Cargo.toml"
  rm -f "$work/cbindgen/Cargo.lock"
  say "building bindgen and cbindgen (Debian 13's crates, Debian 12's Rust)"
  (cd "$work/bindgen" && "${rust_env[@]}" cargo build --release -j "$(nproc)" >"$work/bindgen.log" 2>&1) ||
    { tail -20 "$work/bindgen.log" >&2; die "building bindgen failed"; }
  (cd "$work/cbindgen" && "${rust_env[@]}" cargo build --release -j "$(nproc)" --features clap --bin cbindgen >"$work/cbindgen.log" 2>&1) ||
    { tail -20 "$work/cbindgen.log" >&2; die "building cbindgen failed"; }
  local src
  src=$(mesa_source "$version")
  # Mesa's Rust crates as meson subprojects: Debian 13's sources under the folder names of Mesa's
  # wraps, with Mesa's meson.build for each (no download: --wrap-mode=nodownload).
  for wrap in syn proc-macro2 quote paste unicode-ident; do
    local folder crate
    folder=$(awk -F' *= *' '$1 == "directory" {print $2}' "$src/subprojects/$wrap.wrap")
    crate=$(find "$registry" -maxdepth 1 -name "$wrap-[0-9]*" | sort -V | tail -1)
    cp -r "$crate" "$src/subprojects/$folder"
    cp "$src/subprojects/packagefiles/$wrap/meson.build" "$src/subprojects/$folder/"
  done
  printf "[binaries]\nrust = ['%s']\nbindgen = '%s'\ncbindgen = '%s'\n" "$work/rust/usr/bin/rustc" \
    "$work/bindgen/target/release/bindgen" "$work/cbindgen/target/release/cbindgen" >"$work/native.ini"
  local build_env=("${rust_env[@]}" "PYTHONPATH=$work/tools/usr/lib/python3/dist-packages" "PKG_CONFIG_PATH=$work/tools/$lib/pkgconfig")
  (cd "$src" && "${build_env[@]}" /usr/bin/python3 "$work/tools/usr/bin/meson" setup "$work/nvk" --native-file "$work/native.ini" \
    --wrap-mode=nodownload -Dvulkan-drivers=nouveau -Dgallium-drivers= -Dplatforms= -Dglx=disabled -Degl=disabled -Dgbm=disabled \
    -Dllvm=disabled -Dtools=drm-shim -Dbuildtype=release -Dvideo-codecs= -Dzstd=disabled -Dopengl=false -Dgles1=disabled \
    -Dgles2=disabled >"$work/meson.log" 2>&1) || { tail -20 "$work/meson.log" >&2; die "meson setup of NVK failed"; }
  say "building NVK and the nouveau shim"
  "${build_env[@]}" ninja -C "$work/nvk" -j "$(nproc)" src/nouveau/vulkan/libvulkan_nouveau.so \
    src/nouveau/drm-shim/libnouveau_noop_drm_shim.so >"$work/ninja.log" 2>&1 || { tail -20 "$work/ninja.log" >&2; die "building NVK failed"; }
  mkdir -p "$nvk/lib"
  cp "$work/nvk/src/nouveau/vulkan/libvulkan_nouveau.so" "$work/nvk/src/nouveau/drm-shim/libnouveau_noop_drm_shim.so" "$nvk/lib/"
  printf '{\n  "file_format_version": "1.0.0",\n  "ICD": {"library_path": "%s", "api_version": "1.4.305"}\n}\n' \
    "$nvk/lib/libvulkan_nouveau.so" >"$nvk/nouveau_icd.json"
  echo "$recipe" >"$nvk/READY"
  say "prepared NVK (Mesa $version) in $nvk in $((SECONDS - start)) s"
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
  local is_amd=0 is_intel=0 is_nvidia=0
  case " ${amd_mesa25[*]} " in *" $target "*) is_amd=1 ;; esac
  case " ${intel[*]} " in *" $target "*) is_intel=1 ;; esac
  case " ${nvidia[*]} " in *" $target "*) is_nvidia=1 ;; esac
  [ $((is_amd + is_intel + is_nvidia)) -eq 1 ] ||
    { say "unknown target '$target': one of ${amd_system[*]} ${amd_mesa25[*]} ${intel[*]} ${nvidia[*]}"; exit 2; }
  ready || die "$target needs Mesa 25, not prepared in $cache: run tools/gpu-compilers.sh prepare"
  [ $is_nvidia -eq 0 ] || nvidia_ready ||
    die "$target needs NVK, not prepared in $cache: run tools/gpu-compilers.sh prepare --nvidia (about 30 minutes on 2 cores)"
  echo "export LD_LIBRARY_PATH=$(quote "$mesa25/lib")\${LD_LIBRARY_PATH:+\":\$LD_LIBRARY_PATH\"}"
  if [ $is_nvidia -eq 1 ]; then
    # TU102 (Turing, RTX 2080 Ti) and GA102 (Ampere, RTX 3090) by the shim's NOUVEAU_CHIPSET.
    echo "export VK_ICD_FILENAMES=$(quote "$nvk/nouveau_icd.json")"
    echo "export LD_PRELOAD=$(quote "$nvk/lib/libnouveau_noop_drm_shim.so")"
    echo "export NOUVEAU_CHIPSET=$([ "$target" = turing ] && echo 162 || echo 172)"
  elif [ $is_amd -eq 1 ]; then
    echo "export VK_ICD_FILENAMES=$(quote "$mesa25/radeon_icd.json")"
    echo "export RADV_FORCE_FAMILY=${target%-mesa25}"
  else
    echo "export VK_ICD_FILENAMES=$(quote "$mesa25/intel_icd.json")"
    echo "export LD_PRELOAD=$(quote "$mesa25/lib/libintel_noop_drm_shim.so")"
    echo "export INTEL_STUB_GPU_PLATFORM=$target"
  fi
}

case "${1:-}" in
  prepare)
    [ $# -le 2 ] && { [ $# -eq 1 ] || [ "$2" = --nvidia ]; } || { say "usage: $0 prepare [--nvidia]"; exit 2; }
    prepare "${2:-}" ;;
  env)
    [ $# -eq 2 ] || { say "usage: $0 env TARGET"; exit 2; }
    env_of "$2" ;;
  targets)
    for t in "${amd_system[@]}" "${amd_mesa25[@]}" "${intel[@]}" "${nvidia[@]}"; do
      if reason=$(env_of "$t" 2>&1 >/dev/null); then echo "$t ready"; else echo "$t ${reason#gpu-compilers: }"; fi
    done ;;
  *) say "usage: $0 prepare [--nvidia] | env TARGET | targets"; exit 2 ;;
esac
