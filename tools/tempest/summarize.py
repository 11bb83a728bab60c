"""Summarise a tempest subunit stream and judge it against our deviations.

Usage: stestr last --subunit | python summarize.py --policy-mode new|legacy
Exit 0 only if every selected test passed, except the deliberate deviations
of the service's policy mode, which must fail with the exception our
service answers by design. In the other mode such a test must pass.
"""

import argparse
import re
import sys

import subunit
import testtools

BOTH = ('legacy', 'new')
# The plugin pins upstream's 500 (ServerFault) on bad input; the contract
# answers 4xx.
PINS_500 = 'the plugin pins upstream 500; we answer %s by design'
# Under the new defaults the inventory of every host is for admins; the
# plugin reads it as a project manager there (as admin under the legacy
# defaults, where a manager may still read it).
MANAGER_READS = ('the plugin reads the inventory as a project manager; '
                 'the new defaults keep it for admins')

# Class.method: (exception it must fail with, policy modes, why).
EXPECTED_DEVIATIONS = {
    'DeviceProfileNegativeTest.test_create_device_profile_name_is_null':
        ('BadRequest', BOTH, PINS_500 % 400),
    'DeviceProfileNegativeTest.test_create_device_profile_name_to_long':
        ('BadRequest', BOTH, PINS_500 % 400),
    'DeviceProfileNegativeTest.test_create_device_profile_server_fault':
        ('Conflict', BOTH, PINS_500 % '409 to a duplicate uuid'),
}
for _test in (
        'TestDevice.test_list_get_device',
        'TestDevice.test_list_devices_filter_by_type',
        'TestDevice.test_list_devices_filter_by_non_exist_type',
        'TestDevice.test_list_devices_filter_by_vendor',
        'TestDevice.test_list_devices_filter_by_non_exist_vendor',
        'TestDevice.test_list_devices_filter_by_hostname',
        'TestDevice.test_list_devices_filter_by_non_exist_hostname',
        'TestDevice.test_list_devices_filter_by_combine_args',
        'DeviceNegativeTest.test_get_non_existent_device',
        'TestDeployables.test_list_deployables',
        'DeployableNegativeTest.test_get_non_existent_deployable',
        'TestAttributes.test_list_attributes',
        'TestAttributes.test_get_attribute',
        'AttributeNegativeTest.test_get_non_existent_attribute'):
    EXPECTED_DEVIATIONS[_test] = ('Forbidden', ('new',), MANAGER_READS)


def short_name(test_id):
    """Class and method, without the module and tempest's ``[id-...,tags]``
    suffix."""
    return '.'.join(re.sub(r'\[.*\]$', '', test_id).split('.')[-2:])


def details_text(test):
    parts = []
    for detail in test['details'].values():
        try:
            parts.append(detail.as_text())
        except Exception:
            pass
    return '\n'.join(parts)


def expected_deviation(test_id, mode):
    """(exception, reason) that the test must fail with in ``mode``, or
    None where it must pass."""
    deviation = EXPECTED_DEVIATIONS.get(short_name(test_id))
    if deviation is None or mode not in deviation[1]:
        return None
    return deviation[0], deviation[2]


def read_tests(stream_in):
    tests = []
    stream = subunit.ByteStreamToStreamResult(stream_in,
                                              non_subunit_name='stdout')
    result = testtools.StreamToDict(tests.append)
    result.startTestRun()
    try:
        stream.run(result)
    finally:
        result.stopTestRun()
    return tests


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    parser.add_argument('--policy-mode', required=True, choices=BOTH,
                        help="the service's [oslo_policy] defaults: the "
                             "deviations expected depend on them")
    mode = parser.parse_args(argv).policy_mode
    tests = read_tests(sys.stdin.buffer)

    passed, skipped, failed = [], [], []
    deviations, problems = [], []
    for test in tests:
        status, name = test['status'], test['id']
        if status in ('success', 'xfail'):
            passed.append(name)
        elif status == 'skip':
            skipped.append(name)
        elif status in ('fail', 'uxsuccess'):
            failed.append(name)
        # 'exists'/'inprogress' are listing or unfinished records: ignore.

        expected = expected_deviation(name, mode)
        if expected is None:
            continue
        exception, reason = expected
        if status != 'fail':
            problems.append('%s was expected to fail with %s but was %s'
                            % (name, exception, status))
        elif 'exceptions.%s' % exception not in details_text(test):
            problems.append('%s failed, but not with %s' % (name, exception))
        else:
            deviations.append((name, reason))

    deviated = {name for name, _ in deviations}
    for name in failed:
        if name in deviated:
            continue
        text = details_text(next(t for t in tests if t['id'] == name))
        # The exception and the response body close the traceback.
        print('FAILED %s\n    %s' % (
            name, '\n    '.join(text.strip().splitlines()[-3:])))
    for name, reason in deviations:
        print('expected deviation (%s): %s' % (reason, name))
    for name in skipped:
        print('skipped %s' % name)

    if not tests:
        problems.append('no test ran')
    for problem in problems:
        print('PROBLEM: %s' % problem)
    print('tempest: %d passed, %d failed (%d expected deviations), '
          '%d skipped' % (len(passed), len(failed), len(deviations),
                          len(skipped)))
    unexpected = len(failed) - len(deviations)
    return 1 if problems or unexpected else 0


if __name__ == '__main__':
    sys.exit(main())
