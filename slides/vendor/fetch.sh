#!/usr/bin/env bash
# Re-create slides/vendor/ from the npm registry: the pinned packages, checked against the
# sha256 of the tarballs vendored here, and only the files a deck loads (+ licences).
# Usage: bash slides/vendor/fetch.sh        (needs npm; run from anywhere)
set -euo pipefail
V="$(cd "$(dirname "$0")" && pwd)"
T="$(mktemp -d)"; trap 'rm -rf "$T"' EXIT
cd "$T"
fetch() {  # name@version sha256 -> unpacked in $T/<name>
  npm pack --silent "$1" >/dev/null
  local tgz; tgz=$(ls -t ./*.tgz | head -1)
  echo "$2  $tgz" | sha256sum -c --quiet
  mkdir -p "${1%@*}" && tar xzf "$tgz" -C "${1%@*}" --strip-components=1
}
fetch reveal.js@4.0.2 0c234d5bfe539606c1af4bcc031f0d21ed99e264d90b7859abad34f7e3a0c587
fetch requirejs@2.3.8 777158e89275e16bd51aec3ef714fbcb5dc45789e7078659933bc814916d7dec
fetch mathjax@2.7.9   7131e739848edc14aa661a5516995866b81a477fab8b039d7cc324930e71f786
rm -rf "$V/reveal.js" "$V/require.js/require.js" "$V/mathjax"

# reveal.js: the script and plugin nbconvert's template loads, the white theme, its font (woff:
# every current browser takes it over the eot/ttf the theme also lists).
mkdir -p "$V/reveal.js"
(cd reveal.js && cp --parents LICENSE dist/reveal.js dist/reveal.css dist/theme/white.css \
   dist/theme/fonts/source-sans-pro/LICENSE dist/theme/fonts/source-sans-pro/source-sans-pro.css \
   dist/theme/fonts/source-sans-pro/*.woff plugin/notes/notes.js "$V/reveal.js/")

# require.js: one file; its MIT licence is in its header (see require.js/LICENSE).
mkdir -p "$V/require.js" && cp requirejs/require.js "$V/require.js/"

# MathJax 2: the combined TeX-AMS_CHTML-full configuration nbconvert names, what it loads on
# demand (Safe, menus, TeX extensions, CommonHTML output and fonts), no a11y or localisation.
mkdir -p "$V/mathjax"
(cd mathjax && cp --parents LICENSE MathJax.js config/TeX-AMS_CHTML-full.js config/Safe.js \
   extensions/*.js extensions/TeX/*.js "$V/mathjax/" \
 && cp -r --parents jax/output/CommonHTML jax/element/mml jax/input/TeX fonts/HTML-CSS/TeX/woff "$V/mathjax/")
echo "slides/vendor: $(du -sh "$V" | cut -f1)"
