#!/usr/bin/env bash
# The vLLM test environment of one line, from its lock (ci/locks/vllm-VERSION.txt).
# Prints the env's python as the last line of stdout. See ci/install_env.sh.
#
#   bash ci/vllm/install.sh 0.23.0
exec bash "$(dirname "${BASH_SOURCE[0]}")/../install_env.sh" vllm "${1:?usage: install.sh VLLM_VERSION}"
