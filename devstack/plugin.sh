#!/bin/bash
#
# devstack/plugin.sh: the entry point devstack calls at each phase.
#
# Enable it in local.conf:
#
#     [[local|localrc]]
#     enable_plugin cyborg <url of this repository> [branch]

# Save trace setting
_XTRACE_CYBORG_PLUGIN=$(set +o | grep xtrace)
set -o xtrace

source "$(dirname "${BASH_SOURCE[0]}")/lib/cyborg"

if is_cyborg_enabled; then
    if [[ "$1" == "stack" && "$2" == "install" ]]; then
        echo_summary "Installing Cyborg"
        install_cyborg

    elif [[ "$1" == "stack" && "$2" == "post-config" ]]; then
        echo_summary "Configuring Cyborg"
        configure_cyborg
        configure_nova_for_cyborg
        if is_service_enabled cyborg-api; then
            create_cyborg_accounts
        fi
        if is_service_enabled cyborg-api cyborg-conductor; then
            echo_summary "Initializing the Cyborg database"
            init_cyborg
        fi

    elif [[ "$1" == "stack" && "$2" == "extra" ]]; then
        echo_summary "Starting Cyborg"
        start_cyborg

    elif [[ "$1" == "stack" && "$2" == "test-config" ]]; then
        if is_service_enabled tempest; then
            echo_summary "Configuring Tempest for Cyborg"
            configure_tempest_for_cyborg
        fi
    fi

    if [[ "$1" == "unstack" ]]; then
        echo_summary "Stopping Cyborg"
        stop_cyborg
    fi

    if [[ "$1" == "clean" ]]; then
        echo_summary "Cleaning up Cyborg"
        cleanup_cyborg
    fi
fi

# Restore xtrace
$_XTRACE_CYBORG_PLUGIN
