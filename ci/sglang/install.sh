#!/usr/bin/env bash
# The SGLang test environment of one line, from its lock (ci/locks/sglang-VERSION.txt),
# with this repository installed as a real wheel (the .pth bootstrap and the entry
# points as a user gets them). Prints the env's python as the last line of stdout.
# See ci/install_env.sh.
#
#   bash ci/sglang/install.sh 0.5.5
exec bash "$(dirname "${BASH_SOURCE[0]}")/../install_env.sh" sglang "${1:?usage: install.sh SGLANG_VERSION}"
