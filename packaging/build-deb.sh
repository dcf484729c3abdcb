#!/usr/bin/env bash
# Builds fjord's Debian package (the VPN, without the lab) with cargo-deb into target/debian/ (or
# $CARGO_TARGET_DIR/debian/) and prints its path.
#
#   packaging/build-deb.sh              a release build, then the package
#   packaging/build-deb.sh --profile dev
#                                       package the debug binary the tests
#                                       built (CI: checks the package without
#                                       a second, release, build)
#
# The man pages and shell completions come from the binary being packaged
# (`fjord manpage`, `fjord completions`), so they follow its clap
# definition. cargo-deb is a cargo subcommand, installed here if missing.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
export PATH="$HOME/.cargo/bin:$PATH"

profile=release
if [[ ${1:-} == --profile ]]; then
    profile=${2:?--profile needs a name (release or dev)}
fi
case $profile in
    dev) profile_dir=debug ;;
    *) profile_dir=$profile ;;
esac
target_dir=${CARGO_TARGET_DIR:-target}

log() {
    printf '==> %s\n' "$*" >&2
}

# Pinned: 3.8.0 packages a dev-profile binary with a warning (CI packages
# the binary its tests built); a later version may refuse to.
CARGO_DEB_VERSION=3.8.0
if [[ $(cargo deb --version 2>/dev/null) != *" $CARGO_DEB_VERSION"* ]]; then
    log "installing cargo-deb $CARGO_DEB_VERSION"
    cargo install cargo-deb --version "$CARGO_DEB_VERSION" --locked </dev/null
fi

# The VPN alone: servers get no lab (`fjord lab`, its generators and peer
# drivers).
log "cargo build --profile $profile -p fjord --no-default-features"
cargo build --profile "$profile" -p fjord --bin fjord --no-default-features >&2
binary=$target_dir/$profile_dir/fjord

generated=packaging/generated
rm -rf "$generated"
mkdir -p "$generated/man" "$generated/completions"
"$binary" manpage "$generated/man"
gzip -9n "$generated"/man/*.1
"$binary" completions bash >"$generated/completions/fjord.bash"
"$binary" completions zsh >"$generated/completions/_fjord"
"$binary" completions fish >"$generated/completions/fjord.fish"

log "cargo deb --no-build --profile $profile"
# Only the last line of cargo-deb's output is the package's path.
cargo deb -p fjord --no-build --profile "$profile" --output "$target_dir/debian/" | tail -n 1
