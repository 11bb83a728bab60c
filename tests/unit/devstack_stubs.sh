#!/bin/bash
#
# Stand-ins for the devstack functions that devstack/plugin.sh calls, for
# tests/unit/test_devstack.py. Configuration files are written for real
# (iniset/iniget, in bash); everything else that would touch Keystone, the
# database, Apache or systemd is recorded in $DEVSTACK_CALLS instead, one
# call a line: the name and the arguments, separated by tabs.
#
# Needs: DEVSTACK_CALLS (the record) and DEVSTACK_BIN_DIR (what
# get_python_exec_prefix answers).

function _record {
    local IFS=$'\t'
    echo "$*" >> "$DEVSTACK_CALLS"
}

# iniset [-sudo] <file> <section> <option> <value>
function iniset {
    if [[ "$1" == "-sudo" ]]; then
        shift
    fi
    local file=$1 section=$2 option=$3 value=$4
    local lines=() out=() line current="" written=0
    if [[ -f "$file" ]]; then
        mapfile -t lines < "$file"
    fi
    for line in "${lines[@]}"; do
        if [[ "$line" =~ ^\[(.*)\]$ ]]; then
            if [[ "$current" == "$section" && $written == 0 ]]; then
                out+=("$option = $value")
                written=1
            fi
            current=${BASH_REMATCH[1]}
        elif [[ "$current" == "$section" && $written == 0 && \
                "$line" =~ ^([^=[:space:]]+)[[:space:]]*= && \
                "${BASH_REMATCH[1]}" == "$option" ]]; then
            out+=("$option = $value")
            written=1
            continue
        fi
        out+=("$line")
    done
    if [[ $written == 0 ]]; then
        if [[ "$current" != "$section" ]]; then
            out+=("[$section]")
        fi
        out+=("$option = $value")
    fi
    mkdir -p "$(dirname "$file")"
    printf '%s\n' "${out[@]}" > "$file"
}

# iniget <file> <section> <option>
function iniget {
    local file=$1 section=$2 option=$3
    local line current=""
    [[ -f "$file" ]] || return 0
    while IFS= read -r line; do
        if [[ "$line" =~ ^\[(.*)\]$ ]]; then
            current=${BASH_REMATCH[1]}
        elif [[ "$current" == "$section" && \
                "$line" =~ ^([^=[:space:]]+)[[:space:]]*=[[:space:]]*(.*)$ && \
                "${BASH_REMATCH[1]}" == "$option" ]]; then
            echo "${BASH_REMATCH[2]}"
            return 0
        fi
    done < "$file"
}

# trueorfalse <default> <variable name>
function trueorfalse {
    local default=$1
    local value=${!2:-}
    case "${value,,}" in
        1|yes|true|on) echo True ;;
        0|no|false|off) echo False ;;
        *) echo "$default" ;;
    esac
}

function is_service_enabled {
    local service
    for service in "$@"; do
        if [[ ",$ENABLED_SERVICES," == *",$service,"* ]]; then
            return 0
        fi
        if [[ "$service" == nova && ",$ENABLED_SERVICES" == *",n-"* ]]; then
            return 0
        fi
        if [[ "$service" == glance && ",$ENABLED_SERVICES" == *",g-"* ]]; then
            return 0
        fi
    done
    return 1
}

function enable_service {
    local service
    for service in "$@"; do
        if [[ ",$DISABLED_SERVICES," == *",$service,"* ]]; then
            continue
        fi
        if ! is_service_enabled "$service"; then
            ENABLED_SERVICES="${ENABLED_SERVICES:+$ENABLED_SERVICES,}$service"
        fi
    done
}

function disable_service {
    local service
    for service in "$@"; do
        DISABLED_SERVICES="${DISABLED_SERVICES:+$DISABLED_SERVICES,}$service"
        ENABLED_SERVICES=$(echo ",$ENABLED_SERVICES," | \
            sed -e "s/,$service,/,/g" -e 's/^,//' -e 's/,$//')
    done
}

function define_plugin {
    _record define_plugin "$@"
}

function echo_summary {
    echo "$@"
}

function die {
    echo "die: $*" >&2
    exit 1
}

function sudo {
    "$@"
}

function which {
    if [[ "$1" == uwsgi ]]; then
        echo /usr/local/bin/uwsgi
    else
        command which "$@"
    fi
}

function get_python_exec_prefix {
    echo "$DEVSTACK_BIN_DIR"
}

function setup_develop {
    _record setup_develop "$@"
}

function setup_logging {
    _record setup_logging "$@"
}

# The database is a SQLite file beside the record, so that a real
# cyborg-dbsync can migrate it.
function database_connection_url {
    echo "sqlite:///$(dirname "$DEVSTACK_CALLS")/$1.sqlite"
}

function recreate_database {
    _record recreate_database "$@"
    rm -f "$(dirname "$DEVSTACK_CALLS")/$1.sqlite"
}

function mysql {
    _record mysql "$@"
}

function dropdb {
    _record dropdb "$@"
}

# iniset_rpc_backend <package> <file> [section]
function iniset_rpc_backend {
    _record iniset_rpc_backend "$@"
    iniset "$2" "${3:-DEFAULT}" transport_url \
        "rabbit://stackrabbit:rabbitsecret@$SERVICE_HOST:5672/"
}

# configure_keystone_authtoken_middleware <file> <user> [section] [type]
function configure_keystone_authtoken_middleware {
    local file=$1
    local user=$2
    local section=${3:-keystone_authtoken}
    _record configure_keystone_authtoken_middleware "$@"
    iniset "$file" "$section" auth_type password
    iniset "$file" "$section" interface public
    iniset "$file" "$section" auth_url "$KEYSTONE_SERVICE_URI"
    iniset "$file" "$section" username "$user"
    iniset "$file" "$section" password "$SERVICE_PASSWORD"
    iniset "$file" "$section" user_domain_name "$SERVICE_DOMAIN_NAME"
    iniset "$file" "$section" project_name "$SERVICE_PROJECT_NAME"
    iniset "$file" "$section" project_domain_name "$SERVICE_DOMAIN_NAME"
    if [[ -n "${4:-}" ]]; then
        iniset "$file" "$section" service_type "$4"
    fi
}

function create_service_user {
    _record create_service_user "$@"
}

function get_or_add_user_project_role {
    _record get_or_add_user_project_role "$@"
    echo role-assignment-id
}

function get_or_create_service {
    _record get_or_create_service "$@"
    echo service-id
}

function get_or_create_endpoint {
    _record get_or_create_endpoint "$@"
    echo endpoint-id
}

# write_uwsgi_config <file> <wsgi module or script> <url> [http] [name]
function write_uwsgi_config {
    _record write_uwsgi_config "$@"
    rm -f "$1"
    if [[ "$2" =~ ^[a-zA-Z0-9_.]+:[a-zA-Z0-9_]+$ ]]; then
        iniset "$1" uwsgi module "$2"
    else
        iniset "$1" uwsgi wsgi-file "$2"
    fi
    iniset "$1" uwsgi socket "/var/run/uwsgi/${5:-$(basename "$2")}.socket"
}

function remove_uwsgi_config {
    _record remove_uwsgi_config "$@"
}

# run_process <service> <command> [group] [user]: only enabled services
function run_process {
    if is_service_enabled "$1"; then
        _record run_process "$@"
    fi
}

function stop_process {
    _record stop_process "$@"
}

function wait_for_service {
    _record wait_for_service "$@"
}
