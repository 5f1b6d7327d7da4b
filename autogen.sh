#!/bin/sh
# Generates ./configure from configure.ac (autoreconf), for a git checkout.
set -e
cd "$(dirname "$0")"
autoreconf --install --force
