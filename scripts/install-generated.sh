#!/bin/sh
# meson install step: the man pages and shell completion, made by the
# built binary from its own help texts (kiln man, kiln completion), into
# $DESTDIR$PREFIX/share.
set -eu

kiln=$1
share=${MESON_INSTALL_DESTDIR_PREFIX:?run by meson install}/share
prefix=${MESON_INSTALL_PREFIX:-}

mkdir -p "$share/man/man1" "$share/bash-completion/completions"
"$kiln" man > "$share/man/man1/kiln.1"
# The commands `kiln --help` lists, one page each.
"$kiln" --help | sed -n '/^Commands:/,/^$/{s/^  \([a-z][a-z-]*\) .*/\1/p}' |
while read -r cmd; do
  "$kiln" man "$cmd" > "$share/man/man1/kiln-$cmd.1"
done
"$kiln" completion bash > "$share/bash-completion/completions/kiln"
# Debian's zsh reads vendor-completions under /usr; elsewhere site-functions.
if [ "$prefix" = /usr ]; then
  zsh_dir=$share/zsh/vendor-completions
else
  zsh_dir=$share/zsh/site-functions
fi
mkdir -p "$zsh_dir"
"$kiln" completion zsh > "$zsh_dir/_kiln"
