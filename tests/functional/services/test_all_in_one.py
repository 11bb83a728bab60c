"""cyborg-all-in-one: API, conductor, agent and Placement in one process."""

import json
import os
import re
import selectors
import signal
import socket
import subprocess
import time

import requests

from tests.functional.services.conftest import NVME_SPEC
from tests.functional.services.conftest import RecordedHost
from tests.functional.services.conftest import console_script
from tests.functional.services.conftest import nvme_deployable


def free_port():
    with socket.socket() as sock:
        sock.bind(('127.0.0.1', 0))
        return sock.getsockname()[1]


def run_until_inventory_shown(tmp_path, port, config):
    output = tmp_path / 'all-in-one.out'
    with open(output, 'w') as sink:
        process = subprocess.Popen(
            [console_script('cyborg-all-in-one'), '--state-dir',
             str(tmp_path / 'state'), '--port', str(port),
             '--config-file', str(config)],
            stdout=sink, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while 'Resource providers in Placement:' not in output.read_text():
        assert process.poll() is None, output.read_text()
        assert time.monotonic() < deadline, output.read_text()
        time.sleep(0.2)
    time.sleep(0.5)  # the lines after the heading
    return process, output


def stop(process):
    process.send_signal(signal.SIGTERM)
    assert process.wait(15) == 0


def test_discovers_syncs_and_shows_inventory(tmp_path):
    # A whitelisted PCI device of "this machine" (a recorded tree) besides
    # the fake FPGA.
    recorded = RecordedHost(tmp_path / 'sysfs')
    recorded.add_nvme(0x21)
    config = tmp_path / 'extra.conf'
    config.write_text('[DEFAULT]\nhost = aio-host\n[agent]\nreport_interval '
                      '= 2\n[pci]\nsysfs_root = %s\ndevice_spec = %s\n'
                      % (recorded.root, json.dumps(NVME_SPEC)))
    port = free_port()
    process, output = run_until_inventory_shown(tmp_path, port, config)
    try:
        shown = output.read_text()
        assert 'drivers: fake_driver, pci_driver' in shown
        providers = dict(re.findall(
            r'^    aio-host_(\S+) \(([0-9a-f-]{36})\): ', shown, re.M))
        assert sorted(providers) == sorted(['FakeDevice',
                                            nvme_deployable(0x21)])

        # The API reads what the conductor wrote, with each deployable
        # pointing at the provider shown.
        url = 'http://127.0.0.1:%d/v2' % port
        devices = requests.get(url + '/devices', timeout=10).json()
        assert sorted(d['type'] for d in devices['devices']) == ['FPGA',
                                                                 'SSD']
        deployables = requests.get(url + '/deployables', timeout=10).json()
        assert {d['name']: d['rp_uuid']
                for d in deployables['deployables']} == providers
    finally:
        stop(process)

    # A restart reuses the state: the same providers come back.
    process, output = run_until_inventory_shown(tmp_path, port, config)
    try:
        again = dict(re.findall(r'^    aio-host_(\S+) \(([0-9a-f-]{36})\): ',
                                output.read_text(), re.M))
        assert again == providers
    finally:
        stop(process)
    assert 'threads only' in (tmp_path / 'state' / 'cyborg.log').read_text()


def run_demo(tmp_path, port, piped=False):
    """Started with --demo, once ready; ``piped``: its stdout is a pipe
    (``| head``), read up to the ready line, its errors in a file."""
    output = tmp_path / 'demo.out'
    argv = [console_script('cyborg-all-in-one'), '--state-dir',
            str(tmp_path / 'state'), '--port', str(port), '--demo']
    with open(output, 'w') as sink:
        # Unbuffered: select() sees each line as it comes.
        process = subprocess.Popen(
            argv, stdout=subprocess.PIPE if piped else sink,
            stderr=sink if piped else subprocess.STDOUT, bufsize=0)
    if piped:
        try:
            return process, read_until_ready(process, output)
        except BaseException:
            process.kill()
            process.wait()
            raise
    deadline = time.monotonic() + 60
    while 'cyborg-all-in-one: ready' not in output.read_text():
        assert process.poll() is None, output.read_text()
        assert time.monotonic() < deadline, output.read_text()
        time.sleep(0.2)
    return process, output.read_text()


def read_until_ready(process, errors):
    shown = []
    deadline = time.monotonic() + 60
    with selectors.DefaultSelector() as selector:
        selector.register(process.stdout, selectors.EVENT_READ)
        while not shown or 'cyborg-all-in-one: ready' not in shown[-1]:
            assert time.monotonic() < deadline, errors.read_text()
            if selector.select(timeout=1):
                line = process.stdout.readline().decode()
                assert line, errors.read_text()
                shown.append(line)
    return ''.join(shown)


def test_demo_binds_an_arq_and_ctrl_c_stops_everything(tmp_path):
    port = free_port()
    url = 'http://127.0.0.1:%d/v2/accelerator_requests' % port
    process, shown = run_demo(tmp_path, port)
    try:
        assert 'Device profile demo-fpga created' in shown
        bound = re.findall(r'^    ([0-9a-f-]{36}) Bound: TEST_PCI handle '
                           r'([0-9a-f-]{36}) at ffff:0c:', shown, re.M)
        assert len(bound) == 1, shown
        arqs = requests.get(url, timeout=10).json()['arqs']
        assert [(a['uuid'], a['state'], a['attach_handle_uuid'])
                for a in arqs] == [(bound[0][0], 'Bound', bound[0][1])]
    finally:
        # What Ctrl-C sends.
        process.send_signal(signal.SIGINT)
        assert process.wait(15) == 0

    # A second start reuses the profile and binds the demo instance afresh;
    # its console is a pipe whose reader is gone when Ctrl-C comes.
    process, shown = run_demo(tmp_path, port, piped=True)
    try:
        assert 'Device profile demo-fpga exists from an earlier start' in shown
        again = re.findall(r'^    ([0-9a-f-]{36}) Bound: ', shown, re.M)
        arqs = requests.get(url, timeout=10).json()['arqs']
        assert [a['uuid'] for a in arqs] == again
        assert again != [bound[0][0]]
    finally:
        process.stdout.close()
        process.send_signal(signal.SIGINT)
        assert process.wait(15) == 0
    # "stopped" went nowhere, without a BrokenPipeError anywhere.
    assert (tmp_path / 'demo.out').read_text() == ''
    assert 'Traceback' not in (tmp_path / 'state' / 'cyborg.log').read_text()


def test_a_start_that_fails_says_why_on_the_console(tmp_path):
    state = tmp_path / 'state'
    api_conf = tmp_path / 'cyborg-api.conf'
    with socket.socket() as busy:
        busy.bind(('127.0.0.1', 0))
        busy.listen()
        port = busy.getsockname()[1]
        api_conf.write_text(
            '[DEFAULT]\nauth_strategy = noauth\nlog_file = %s\n'
            '[database]\nconnection = sqlite:///%s\n[api]\nport = %d\n'
            % (tmp_path / 'cyborg-api.log', tmp_path / 'api.sqlite', port))
        started = [
            ([console_script('cyborg-all-in-one'), '--state-dir',
              str(state), '--port', str(port)], state / 'cyborg.log'),
            ([console_script('cyborg-api'), '--config-file', str(api_conf)],
             tmp_path / 'cyborg-api.log')]
        for argv, log_file in started:
            ran = subprocess.run(argv, capture_output=True, text=True,
                                 timeout=120)
            assert ran.returncode == 1, ran
            name = os.path.basename(argv[0])
            assert ran.stderr.startswith(
                '%s: failed to start: OSError: ' % name), ran.stderr
            assert ran.stderr.endswith(
                "('127.0.0.1', %d): [Errno 98] Address already in use); "
                'the log is %s\n' % (port, log_file)), ran.stderr
            assert 'stopped' not in ran.stdout
            assert '%s failed to start' % name in log_file.read_text()
