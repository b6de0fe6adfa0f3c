#!/usr/bin/env bash
# Install the Debian packages named in $1 (one per line, # comments) that are not installed yet.
# Only as root: a developer without root gets the list to install instead of a failed sudo.
set -euo pipefail
list="${1:?usage: system-deps.sh FILE}"
mapfile -t wanted < <(sed -e 's/#.*//' -e '/^[[:space:]]*$/d' "$list" | awk '{print $1}')
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
