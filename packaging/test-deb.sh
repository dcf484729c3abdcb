#!/usr/bin/env bash
# Installs fjord's .deb (argument, or the newest in target/debian/) with
# `dpkg -i` into a clean root and checks what a user would: `fjord
# --version`, `man fjord`, the completions, `systemd-analyze verify` on the
# installed unit, the example config's mode, removal and purge. Needs root.
#
# The clean root is an empty directory with a dpkg database of its own
# (`dpkg --root`): nothing installed, so dpkg unpacks every file of the
# package and records them, as on a system that never had fjord. (A
# debootstrap chroot would also need a mirror and minutes; the package has
# no maintainer scripts that would need one.) Its dependencies (libc6,
# iproute2) are the host's, hence --force-depends. The checks then run in
# a private mount namespace where the root's /usr, /lib and /etc are laid
# over the host's (read-only overlays), so `fjord`, `man fjord` and
# systemd find the files where the package put them, and the host is not
# touched.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."

deb=${1:-$(ls -t "${CARGO_TARGET_DIR:-target}"/debian/fjord_*.deb | head -n 1)}
version=$(dpkg-deb --field "$deb" Version)

log() {
    printf '==> %s\n' "$*" >&2
}

fail() {
    printf 'test-deb: %s\n' "$*" >&2
    exit 1
}

root=$(mktemp -d /tmp/fjord-deb-root.XXXXXX)
trap 'rm -rf "$root"' EXIT
mkdir -p "$root"/var/lib/dpkg/{info,updates,triggers}
touch "$root/var/lib/dpkg/status"

log "dpkg -i $deb into the clean root $root"
dpkg --root="$root" --force-depends -i "$deb" >/dev/null 2>"$root.err" ||
    { cat "$root.err" >&2; fail "dpkg -i failed"; }
rm -f "$root.err"
dpkg --root="$root" -s fjord | grep -q '^Status: install ok installed' ||
    fail "fjord is not recorded as installed"
for path in /usr/bin/fjord /lib/systemd/system/fjord@.service /etc/fjord/example.conf \
    /usr/share/man/man1/fjord.1.gz /usr/share/man/man1/fjord-up.1.gz \
    /usr/share/bash-completion/completions/fjord /usr/share/zsh/vendor-completions/_fjord \
    /usr/share/fish/vendor_completions.d/fjord.fish; do
    dpkg --root="$root" -L fjord | grep -qx "$path" || fail "$path is not in the package"
    [[ -e $root$path ]] || fail "$path was not installed"
done
[[ $(stat -c %a "$root/etc/fjord/example.conf") == 600 ]] ||
    fail "/etc/fjord/example.conf is not mode 600 (fjord would refuse it)"

log "the installed files where a system has them (a private mount namespace)"
export FJORD_DEB_VERSION=${version%-*}
unshare --mount --propagation private bash -euo pipefail -c '
fail() { printf "test-deb: %s\n" "$*" >&2; exit 1; }
root=$1
mount -t overlay fjord-usr -o "lowerdir=$root/usr:/usr" /usr
# /lib is /usr/lib on a merged-/usr system; the package writes /lib.
mount -t overlay fjord-lib -o "lowerdir=$root/lib:/usr/lib" /usr/lib
mount -t overlay fjord-etc -o "lowerdir=$root/etc:/etc" /etc

[[ $(command -v fjord) == /usr/bin/fjord ]] || fail "fjord is not /usr/bin/fjord"
[[ $(fjord --version) == "fjord $FJORD_DEB_VERSION" ]] || fail "fjord --version: $(fjord --version)"
echo "fjord --version: $(fjord --version)"
MANPAGER=cat man fjord | grep -q "WireGuard" || fail "man fjord"
MANPAGER=cat man fjord-up | grep -q -- "--threads" || fail "man fjord-up lacks --threads"
if MANPAGER=cat man fjord-network-sign | grep -q -- "--threads"; then
    fail "man fjord-network-sign lists --threads"
fi
echo "man fjord: $(MANPAGER=cat man fjord | grep -c .) lines"
bash -c "source /usr/share/bash-completion/completions/fjord && complete -p fjord" >/dev/null ||
    fail "the bash completion does not load"
systemd-analyze verify fjord@example.service || fail "systemd-analyze verify fjord@example.service"
echo "systemd-analyze verify fjord@example.service: ok"
# The example holds no key: the service would refuse it, not run it.
status=0
fjord up /etc/fjord/example.conf 2>/dev/null || status=$?
[[ $status == 2 ]] || fail "fjord up /etc/fjord/example.conf: exit $status, not 2"
' test-deb "$root"

log "dpkg -r keeps /etc/fjord/example.conf (a conffile), --purge removes it"
dpkg --root="$root" -r fjord >/dev/null
[[ ! -e $root/usr/bin/fjord && -e $root/etc/fjord/example.conf ]] || fail "dpkg -r"
dpkg --root="$root" --purge fjord >/dev/null
[[ ! -e $root/etc/fjord/example.conf ]] || fail "dpkg --purge"
log "package ok: $deb"
