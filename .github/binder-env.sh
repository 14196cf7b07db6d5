#!/usr/bin/env bash
# Commit _extra/binder, alone, as the one commit of a `binder-env` branch in a
# scratch repository, and print that commit's SHA.
#
# Author, committer, dates and message are fixed, so the SHA depends on the
# environment files only: re-pushing an unchanged environment is a no-op, and
# Binder (which keys its image on the commit) does not rebuild. The site's
# gh-pages branch, force-pushed as a new commit on every deploy, is only the
# content that nbgitpuller pulls into that image.
#
# Usage: .github/binder-env.sh SCRATCH_DIR   (the directory is replaced)
# With GITHUB_REPOSITORY=OWNER/REPO the image installs selfattn from that repository.
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)/_extra/binder"
work="${1:?usage: $0 SCRATCH_DIR}"
rm -rf "$work"
mkdir -p "$work/binder"
cp "$src"/* "$work/binder/"
# The image installs the package from the repository that publishes it: a fork's
# Binder builds the fork's package (GITHUB_REPOSITORY: set by GitHub Actions).
if [ -n "${GITHUB_REPOSITORY:-}" ]; then
  sed -i "s|^selfattn @ git+https://github.com/[^@]*@|selfattn @ git+https://github.com/${GITHUB_REPOSITORY}@|" \
    "$work/binder/requirements.txt"
fi
cd "$work"
git init -q -b binder-env
git add -A
export GIT_AUTHOR_NAME="book-bot" GIT_COMMITTER_NAME="book-bot"
export GIT_AUTHOR_EMAIL="book-bot@users.noreply.github.com"
export GIT_COMMITTER_EMAIL="$GIT_AUTHOR_EMAIL"
export GIT_AUTHOR_DATE="2000-01-01T00:00:00+0000" GIT_COMMITTER_DATE="2000-01-01T00:00:00+0000"
git -c commit.gpgsign=false commit -q -m "Binder environment (copied from _extra/binder)"
git rev-parse HEAD
