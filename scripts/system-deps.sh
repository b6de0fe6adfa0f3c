#!/usr/bin/env bash
# Install the Debian packages named in the lists given (one per line, # comments) that are not
# installed yet. Only as root: without root it names what to install instead of a failed sudo.
set -euo pipefail
[ $# -gt 0 ] || exit 0  # no lists: nothing to install
mapfile -t wanted < <(cat "$@" /dev/null | sed -e 's/#.*//' -e '/^[[:space:]]*$/d' | awk '{print $1}' | sort -u)
[ ${#wanted[@]} -eq 0 ] && exit 0
missing=()
for pkg in "${wanted[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
  echo "missing Debian packages: ${missing[*]} (install them as root: apt-get install ${missing[*]})" >&2
  exit 1
fi
echo "installing Debian packages: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
