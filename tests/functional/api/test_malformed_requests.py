"""Bad input gets a 4xx, a sentence naming the problem, and changes nothing.

Each case is sent to the real app on each database engine; afterwards
every table must hold exactly what it held before.
"""

import json

import pytest
import sqlalchemy as sa
import webtest

from cyborg.api import app as api_app
from cyborg.db import models
from cyborg.db import session
from tests import conftest
from tests import inventory_rows

DP = '/v2/device_profiles'
DEV = '/v2/devices'
DEP = '/v2/deployables'
ATTR = '/v2/attributes'
ARQ = '/v2/accelerator_requests'
# The inventory rows of the module's database get these uuids.
DEVICE = 'de000000-0000-4000-8000-000000000001'
DEPLOYABLE = 'de000000-0000-4000-8000-000000000002'
ATTRIBUTE = 'de000000-0000-4000-8000-000000000003'
ARQ_UUID = 'de000000-0000-4000-8000-000000000004'
INSTANCE = 'de000000-0000-4000-8000-000000000005'
UNKNOWN = '7a0b1c2d-0000-4000-8000-000000000000'
IMAGE = '5b7d2b0a-1e4c-4a7e-9d0c-2a8c0b7f3e11'
OVERRIDE = DEV + '/%s/health_override' % DEVICE
V25 = {'OpenStack-API-Version': 'accelerator 2.5'}
GOOD_GROUP = {'resources:FPGA': '1', 'trait:CUSTOM_FAKE_DEVICE': 'required'}


def profile(**fields):
    body = {'name': 'dp-malformed', 'groups': [dict(GOOD_GROUP)]}
    body.update(fields)
    return body


def without(field):
    body = profile()
    del body[field]
    return body


def group(**items):
    """A profile whose single group is GOOD_GROUP plus ``items``."""
    g = dict(GOOD_GROUP)
    g.update(items)
    return [profile(groups=[g])]


def raw_group(g):
    return [profile(groups=[g])]


def program(**changes):
    """The program patch, with ``changes`` to its one operation."""
    op = {'path': '/program', 'op': 'replace',
          'value': [{'image_uuid': IMAGE}]}
    op.update(changes)
    return [{k: v for k, v in op.items() if v is not _DROP}]


def attribute(**changes):
    body = {'deployable_id': DEPLOYABLE, 'key': 'colour', 'value': 'blue'}
    body.update(changes)
    return {k: v for k, v in body.items() if v is not _DROP}


def bind(*drop, **values):
    """A bind of the module's ARQ: the three ops, less ``drop``, with
    ``values`` changed (_DROP leaves an op's value out)."""
    fields = {'hostname': 'host1', 'device_rp_uuid': UNKNOWN,
              'instance_uuid': INSTANCE}
    fields.update(values)
    ops = []
    for name, value in fields.items():
        if name in drop:
            continue
        op = {'op': 'add', 'path': '/' + name, 'value': value}
        if value is _DROP:
            del op['value']
        ops.append(op)
    return {ARQ_UUID: ops}


_DROP = object()
PROGRAM = DEP + '/' + DEPLOYABLE + '/program'


# (case id, method, path, body (JSON-able, or bytes sent as is),
#  extra headers, expected status, a word the message must contain)
CASES = [
    # The body itself.
    ('not-json', 'POST', DP, b'{"name": ', {}, 400, 'JSON'),
    ('not-utf8', 'POST', DP, b'\xff\xfe[]', {}, 400, 'JSON'),
    ('text-plain', 'POST', DP, [profile()],
     {'Content-Type': 'text/plain'}, 415, 'application/json'),
    ('no-content-type', 'POST', DP, [profile()], {'Content-Type': ''},
     415, 'application/json'),
    ('object-not-array', 'POST', DP, profile(), {}, 400, 'array'),
    ('empty-array', 'POST', DP, [], {}, 400, 'empty'),
    ('null-body', 'POST', DP, None, {}, 400, 'array'),
    ('string-body', 'POST', DP, 'dp', {}, 400, 'array'),
    ('null-item', 'POST', DP, [None], {}, 400, 'object'),
    ('string-item', 'POST', DP, ['dp'], {}, 400, 'object'),
    ('array-item', 'POST', DP, [[]], {}, 400, 'object'),
    ('unknown-key', 'POST', DP, [profile(colour='blue')], {}, 400,
     'colour'),
    ('same-name-twice', 'POST', DP, [profile(), profile()], {}, 400,
     'twice'),
    # name
    ('name-missing', 'POST', DP, [without('name')], {}, 400, 'name'),
    ('name-null', 'POST', DP, [profile(name=None)], {}, 400, 'name'),
    ('name-number', 'POST', DP, [profile(name=5)], {}, 400, 'name'),
    ('name-bool', 'POST', DP, [profile(name=True)], {}, 400, 'name'),
    ('name-list', 'POST', DP, [profile(name=['a'])], {}, 400, 'name'),
    ('name-empty', 'POST', DP, [profile(name='')], {}, 400, 'name'),
    ('name-256', 'POST', DP, [profile(name='n' * 256)], {}, 400, 'name'),
    ('name-space', 'POST', DP, [profile(name='a b')], {}, 400, 'name'),
    ('name-slash', 'POST', DP, [profile(name='a/b')], {}, 400, 'name'),
    ('name-unicode', 'POST', DP, [profile(name='na\u00efve')], {}, 400,
     'name'),
    # description and uuid
    ('description-number', 'POST', DP, [profile(description=5)], {}, 400,
     'description'),
    ('description-object', 'POST', DP, [profile(description={})], {}, 400,
     'description'),
    ('description-too-long', 'POST', DP, [profile(description='d' * 1025)],
     {}, 400, 'description'),
    ('uuid-bad', 'POST', DP, [profile(uuid='not-a-uuid')], {}, 400, 'uuid'),
    ('uuid-number', 'POST', DP, [profile(uuid=5)], {}, 400, 'uuid'),
    ('uuid-empty', 'POST', DP, [profile(uuid='')], {}, 400, 'uuid'),
    # groups
    ('groups-missing', 'POST', DP, [without('groups')], {}, 400, 'groups'),
    ('groups-null', 'POST', DP, [profile(groups=None)], {}, 400, 'groups'),
    ('groups-string', 'POST', DP, [profile(groups='x')], {}, 400,
     'groups'),
    ('groups-object', 'POST', DP, [profile(groups={})], {}, 400, 'groups'),
    ('groups-empty', 'POST', DP, [profile(groups=[])], {}, 400, 'groups'),
    ('group-null', 'POST', DP, [profile(groups=[None])], {}, 400, 'Group 0'),
    ('group-string', 'POST', DP, [profile(groups=['x'])], {}, 400,
     'Group 0'),
    ('group-empty', 'POST', DP, [profile(groups=[{}])], {}, 400, 'Group 0'),
    ('second-group-bad', 'POST', DP,
     [profile(groups=[dict(GOOD_GROUP), {'resources:FPGA': 'x'}])], {}, 400,
     'resources:FPGA'),
    # key prefixes
    ('prefix-resource', 'POST', DP, group(**{'resource:FPGA': '1'}), {},
     400, 'resource:FPGA'),
    ('prefix-none', 'POST', DP, group(FPGA='1'), {}, 400, 'FPGA'),
    ('prefix-bare-resources', 'POST', DP, group(**{'resources:': '1'}), {},
     400, 'resources:'),
    ('prefix-bare-trait', 'POST', DP, group(**{'trait:': 'required'}), {},
     400, 'trait:'),
    ('prefix-bare-accel', 'POST', DP, group(**{'accel:': 'x'}), {}, 400,
     'accel:'),
    # resources: counts and classes
    ('count-zero', 'POST', DP, raw_group({'resources:FPGA': '0'}), {}, 400,
     'resources:FPGA'),
    ('count-negative', 'POST', DP, raw_group({'resources:FPGA': '-1'}), {},
     400, 'resources:FPGA'),
    ('count-fraction', 'POST', DP, raw_group({'resources:FPGA': '1.5'}), {},
     400, 'resources:FPGA'),
    ('count-word', 'POST', DP, raw_group({'resources:FPGA': 'one'}), {},
     400, 'resources:FPGA'),
    ('count-empty', 'POST', DP, raw_group({'resources:FPGA': ''}), {}, 400,
     'resources:FPGA'),
    ('count-null', 'POST', DP, raw_group({'resources:FPGA': None}), {}, 400,
     'resources:FPGA'),
    ('count-bool', 'POST', DP, raw_group({'resources:FPGA': True}), {}, 400,
     'resources:FPGA'),
    ('count-float', 'POST', DP, raw_group({'resources:FPGA': 1.5}), {}, 400,
     'resources:FPGA'),
    ('count-list', 'POST', DP, raw_group({'resources:FPGA': ['1']}), {},
     400, 'resources:FPGA'),
    ('count-huge', 'POST', DP, raw_group({'resources:FPGA': '9' * 20}), {},
     400, 'resources:FPGA'),
    ('class-unknown', 'POST', DP, raw_group({'resources:WIDGET': '1'}), {},
     400, 'resources:WIDGET'),
    ('class-illegal', 'POST', DP,
     raw_group({'resources:CUSTOM_A B': '1'}), {}, 400, 'resources:CUSTOM'),
    ('same-class-twice', 'POST', DP,
     raw_group({'resources:custom-gpu': '1', 'resources:CUSTOM_GPU': '2'}),
     {}, 400, 'twice'),
    # trait: values and names
    ('trait-yes', 'POST', DP, group(**{'trait:CUSTOM_X': 'yes'}), {}, 400,
     'trait:CUSTOM_X'),
    ('trait-upper', 'POST', DP, group(**{'trait:CUSTOM_X': 'REQUIRED'}), {},
     400, 'trait:CUSTOM_X'),
    ('trait-null', 'POST', DP, group(**{'trait:CUSTOM_X': None}), {}, 400,
     'trait:CUSTOM_X'),
    ('trait-number', 'POST', DP, group(**{'trait:CUSTOM_X': 1}), {}, 400,
     'trait:CUSTOM_X'),
    ('trait-unknown', 'POST', DP, group(**{'trait:NOT_A_TRAIT': 'required'}),
     {}, 400, 'trait:NOT_A_TRAIT'),
    # accel: keys and values
    ('accel-unknown', 'POST', DP, group(**{'accel:video_ram': '2GB'}), {},
     400, 'accel:video_ram'),
    ('accel-bitstream-id', 'POST', DP, group(**{'accel:bitstream_id': 'x'}),
     {}, 400, 'accel:bitstream_id'),
    ('accel-function-id', 'POST', DP, group(**{'accel:function_id': '3AFB'}),
     {}, 400, 'accel:function_id'),
    ('accel-bitstream-name', 'POST', DP,
     group(**{'accel:bitstream_name': 'a b'}), {}, 400,
     'accel:bitstream_name'),
    ('accel-function-name', 'POST', DP,
     group(**{'accel:function_name': ''}), {}, 400, 'accel:function_name'),
    ('accel-attach-target', 'POST', DP,
     group(**{'accel:attach_target': 'vm'}), {}, 400, 'accel:attach_target'),
    ('accel-null', 'POST', DP, group(**{'accel:function_name': None}), {},
     400, 'accel:function_name'),
    ('accel-number', 'POST', DP, group(**{'accel:bitstream_id': 7}), {}, 400,
     'accel:bitstream_id'),
    # Microversions.
    ('version-3', 'GET', DP, None,
     {'OpenStack-API-Version': 'accelerator 3.0'}, 406, '3.0'),
    ('version-too-new', 'GET', DP, None,
     {'OpenStack-API-Version': 'accelerator 2.99'}, 406, '2.99'),
    ('version-too-old', 'GET', DP, None,
     {'OpenStack-API-Version': 'accelerator 1.9'}, 406, '1.9'),
    ('version-no-minor', 'GET', DP, None,
     {'OpenStack-API-Version': 'accelerator 2'}, 406, '2'),
    ('version-word', 'GET', DP, None,
     {'OpenStack-API-Version': 'accelerator newest'}, 406, 'newest'),
    ('version-on-post', 'POST', DP, [profile()],
     {'OpenStack-API-Version': 'accelerator 2.x'}, 406, '2.x'),
    ('by-name-before-2.2', 'GET', DP + '/dp-malformed', None, {}, 406,
     '2.2'),
    # Query parameters and paths.
    ('limit-zero', 'GET', DP + '?limit=0', None, {}, 400, 'limit'),
    ('limit-word', 'GET', DP + '?limit=ten', None, {}, 400, 'limit'),
    ('marker-bad', 'GET', DP + '?marker=zzz', None, {}, 400, 'marker'),
    ('marker-unknown', 'GET',
     DP + '?marker=7a0b1c2d-0000-4000-8000-000000000000', None, {}, 404,
     'marker'),
    ('sort-key-bad', 'GET', DP + '?sort_key=password', None, {}, 400,
     'sort_key'),
    ('sort-dir-bad', 'GET', DP + '?sort_dir=sideways', None, {}, 400,
     'sort_dir'),
    ('name-filter-empty', 'GET', DP + '?name=', None, {}, 400, 'name'),
    ('delete-no-name', 'DELETE', DP, None, {}, 400, 'value'),
    ('delete-empty-value', 'DELETE', DP + '?value=', None, {}, 400,
     'value'),
    ('delete-empty-path', 'DELETE', DP + '/', None, {}, 400, 'name'),
    ('delete-unknown-uuid', 'DELETE',
     DP + '/7a0b1c2d-0000-4000-8000-000000000000', None, {}, 404,
     '7a0b1c2d-0000-4000-8000-000000000000'),
    ('delete-unknown-name', 'DELETE', DP + '?value=existing,ghost', None, {},
     404, 'ghost'),
    ('get-unknown-uuid', 'GET', DP + '/7a0b1c2d-0000-4000-8000-000000000000',
     None, {}, 404, '7a0b1c2d'),
    ('put-collection', 'PUT', DP, [profile()], {}, 405, 'PUT'),
    ('unknown-path', 'GET', '/v2/widgets', None, {}, 404, '/v2/widgets'),
    # Devices.
    ('device-limit-zero', 'GET', DEV + '?limit=0', None, {}, 400, 'limit'),
    ('device-sort-key-bad', 'GET', DEV + '?sort_key=model', None, {}, 400,
     'sort_key'),
    ('device-marker-unknown', 'GET', DEV + '?marker=' + UNKNOWN, None, {},
     404, 'marker'),
    ('device-not-uuid', 'GET', DEV + '/gpu0', None, {}, 404, 'gpu0'),
    ('device-unknown', 'GET', DEV + '/' + UNKNOWN, None, {}, 404, UNKNOWN),
    ('device-disable-unknown', 'POST', DEV + '/%s/disable' % UNKNOWN, None,
     {}, 404, UNKNOWN),
    ('device-enable-not-uuid', 'POST', DEV + '/gpu0/enable', None, {}, 404,
     'gpu0'),
    ('device-get-disable', 'GET', DEV + '/%s/disable' % DEVICE, None, {},
     405, 'GET'),
    ('device-unknown-action', 'POST', DEV + '/%s/reboot' % DEVICE, None, {},
     404, 'reboot'),
    ('device-delete', 'DELETE', DEV + '/' + DEVICE, None, {}, 405,
     'DELETE'),
    ('device-post', 'POST', DEV, {'type': 'GPU'}, {}, 405, 'POST'),
    ('device-disable-version', 'POST', DEV + '/%s/disable' % DEVICE, None,
     {'OpenStack-API-Version': 'accelerator 2.50'}, 406, '2.50'),
    ('device-health-bad', 'GET', DEV + '?health=sick', None, V25, 400,
     "'sick'"),
    ('device-override-bad', 'PUT', OVERRIDE, {'health_override': 'off'},
     V25, 400, "'off'"),
    ('device-override-not-json', 'PUT', OVERRIDE, b'{"health_override"',
     V25, 400, 'JSON'),
    ('device-override-as-text', 'PUT', OVERRIDE, b'quarantine',
     {**V25, 'Content-Type': 'text/plain'}, 415, 'text/plain'),
    ('device-override-unknown', 'PUT', DEV + '/%s/health_override' % UNKNOWN,
     {'health_override': 'ignore'}, V25, 404, UNKNOWN),
    ('device-override-not-uuid', 'DELETE', DEV + '/gpu0/health_override',
     None, V25, 404, 'gpu0'),
    ('device-override-post', 'POST', OVERRIDE, {'health_override': 'ignore'},
     V25, 405, 'POST'),
    ('device-override-2.4', 'PUT', OVERRIDE, {'health_override': 'ignore'},
     {'OpenStack-API-Version': 'accelerator 2.4'}, 404, 'health_override'),
    # Deployables and their program patch.
    ('deployable-not-uuid', 'GET', DEP + '/FakeDevice', None, {}, 404,
     'FakeDevice'),
    ('deployable-unknown', 'GET', DEP + '/' + UNKNOWN, None, {}, 404,
     UNKNOWN),
    ('deployable-device-filter', 'GET', DEP + '?device_id=1', None, {}, 400,
     'device_id'),
    ('deployable-rp-filter', 'GET', DEP + '?rp_uuid=rp', None, {}, 400,
     'rp_uuid'),
    ('deployable-sort-key-bad', 'GET', DEP + '?sort_key=rp_uuid', None, {},
     400, 'sort_key'),
    ('deployable-patch-item', 'PATCH', DEP + '/' + DEPLOYABLE, program(), {},
     405, 'PATCH'),
    ('program-post', 'POST', PROGRAM, program(), {}, 405, 'POST'),
    ('program-not-json', 'PATCH', PROGRAM, b'[{"path": ', {}, 400, 'JSON'),
    ('program-text-plain', 'PATCH', PROGRAM, program(),
     {'Content-Type': 'text/plain'}, 415, 'application/json'),
    ('program-object', 'PATCH', PROGRAM, program()[0], {}, 400, 'array'),
    ('program-empty', 'PATCH', PROGRAM, [], {}, 400, 'array'),
    ('program-two-ops', 'PATCH', PROGRAM, program() * 2, {}, 400, 'one'),
    ('program-null-op', 'PATCH', PROGRAM, [None], {}, 400, 'object'),
    ('program-unknown-field', 'PATCH', PROGRAM, program(frm='/x'), {}, 400,
     'frm'),
    ('program-no-value', 'PATCH', PROGRAM, program(value=_DROP), {}, 400,
     'value'),
    ('program-no-path', 'PATCH', PROGRAM, program(path=_DROP), {}, 400,
     'path'),
    ('program-other-path', 'PATCH', PROGRAM, program(path='/name'), {}, 400,
     '/name'),
    ('program-op-add', 'PATCH', PROGRAM, program(op='add'), {}, 400,
     'replace'),
    ('program-value-object', 'PATCH', PROGRAM,
     program(value={'image_uuid': IMAGE}), {}, 400, 'image_uuid'),
    ('program-value-empty', 'PATCH', PROGRAM, program(value=[]), {}, 400,
     'image_uuid'),
    ('program-value-two', 'PATCH', PROGRAM,
     program(value=[{'image_uuid': IMAGE}] * 2), {}, 400, 'image_uuid'),
    ('program-value-extra', 'PATCH', PROGRAM,
     program(value=[{'image_uuid': IMAGE, 'x': 1}]), {}, 400, 'image_uuid'),
    ('program-image-bad', 'PATCH', PROGRAM,
     program(value=[{'image_uuid': 'cirros'}]), {}, 400, 'cirros'),
    ('program-image-number', 'PATCH', PROGRAM,
     program(value=[{'image_uuid': 7}]), {}, 400, 'image_uuid'),
    ('program-two-deployables', 'PATCH', PROGRAM + '/' + UNKNOWN, program(),
     {}, 400, UNKNOWN),
    ('program-unknown-deployable', 'PATCH', DEP + '/%s/program' % UNKNOWN,
     program(), {}, 404, UNKNOWN),
    # Attributes.
    ('attribute-not-json', 'POST', ATTR, b'{"key": ', {}, 400, 'JSON'),
    ('attribute-text-plain', 'POST', ATTR, attribute(),
     {'Content-Type': 'text/plain'}, 415, 'application/json'),
    ('attribute-array', 'POST', ATTR, [attribute()], {}, 400, 'object'),
    ('attribute-null', 'POST', ATTR, None, {}, 400, 'object'),
    ('attribute-unknown-field', 'POST', ATTR, attribute(colour='x'), {}, 400,
     'colour'),
    ('attribute-wrapped-and-more', 'POST', ATTR,
     {'attribute': attribute(), 'extra': 1}, {}, 400, 'extra'),
    ('attribute-no-deployable', 'POST', ATTR,
     {'attribute': attribute(deployable_id=_DROP)}, {}, 400,
     'deployable_id'),
    ('attribute-deployable-null', 'POST', ATTR,
     attribute(deployable_id=None), {}, 400, 'null'),
    ('attribute-deployable-bool', 'POST', ATTR,
     attribute(deployable_id=True), {}, 400, 'boolean'),
    ('attribute-deployable-zero', 'POST', ATTR, attribute(deployable_id=0),
     {}, 400, 'deployable_id'),
    ('attribute-deployable-negative', 'POST', ATTR,
     attribute(deployable_id='-1'), {}, 400, '-1'),
    ('attribute-deployable-word', 'POST', ATTR,
     attribute(deployable_id='FakeDevice'), {}, 400, 'FakeDevice'),
    ('attribute-deployable-float', 'POST', ATTR,
     attribute(deployable_id=1.5), {}, 400, 'deployable_id'),
    ('attribute-deployable-unknown', 'POST', ATTR,
     attribute(deployable_id=UNKNOWN), {}, 400, UNKNOWN),
    ('attribute-deployable-unknown-id', 'POST', ATTR,
     attribute(deployable_id='424242'), {}, 400, '424242'),
    ('attribute-no-key', 'POST', ATTR, attribute(key=_DROP), {}, 400, 'key'),
    ('attribute-key-empty', 'POST', ATTR, attribute(key=''), {}, 400, 'key'),
    ('attribute-key-number', 'POST', ATTR, attribute(key=5), {}, 400, 'key'),
    ('attribute-key-256', 'POST', ATTR, attribute(key='k' * 256), {}, 400,
     'key'),
    ('attribute-no-value', 'POST', ATTR, attribute(value=_DROP), {}, 400,
     'value'),
    ('attribute-value-null', 'POST', ATTR, attribute(value=None), {}, 400,
     'value'),
    ('attribute-value-number', 'POST', ATTR, attribute(value=5), {}, 400,
     'value'),
    ('attribute-value-256', 'POST', ATTR, attribute(value='v' * 256), {}, 400,
     'value'),
    ('attribute-duplicate', 'POST', ATTR, attribute(key='rc'), {}, 409,
     'rc'),
    ('attribute-filter-deployable', 'GET', ATTR + '?deployable_id=abc',
     None, {}, 400, 'abc'),
    ('attribute-filter-key-empty', 'GET', ATTR + '?key=', None, {}, 400,
     'key'),
    ('attribute-sort-key-bad', 'GET', ATTR + '?sort_key=value', None, {},
     400, 'sort_key'),
    ('attribute-unknown', 'GET', ATTR + '/' + UNKNOWN, None, {}, 404,
     UNKNOWN),
    ('attribute-delete-empty', 'DELETE', ATTR + '/', None, {}, 400, 'empty'),
    ('attribute-delete-unknown', 'DELETE', ATTR + '/' + UNKNOWN, None, {},
     404, UNKNOWN),
    ('attribute-delete-not-uuid', 'DELETE', ATTR + '/rc', None, {}, 404,
     'rc'),
    ('attribute-delete-all', 'DELETE', ATTR, None, {}, 405, 'DELETE'),
    ('attribute-patch', 'PATCH', ATTR + '/' + ATTRIBUTE, [], {}, 405,
     'PATCH'),
    # Accelerator requests: creating.
    ('arq-not-json', 'POST', ARQ, b'{"device_profile_name"', {}, 400,
     'JSON'),
    ('arq-body-array', 'POST', ARQ, [{'device_profile_name': 'existing'}],
     {}, 400, 'object'),
    ('arq-name-number', 'POST', ARQ, {'device_profile_name': 5}, {}, 400,
     'device_profile_name'),
    ('arq-name-empty', 'POST', ARQ, {'device_profile_name': ''}, {}, 404,
     'device_profile_name'),
    ('arq-name-missing', 'POST', ARQ, {}, {}, 404, 'device_profile_name'),
    ('arq-name-unknown', 'POST', ARQ, {'device_profile_name': 'ghost'}, {},
     404, 'ghost'),
    ('arq-group-word', 'POST', ARQ,
     {'device_profile_name': 'existing', 'device_profile_group_id': 'x'},
     {}, 400, 'device_profile_group_id'),
    ('arq-group-bool', 'POST', ARQ,
     {'device_profile_name': 'existing', 'device_profile_group_id': True},
     {}, 400, 'device_profile_group_id'),
    # Reading.
    ('arq-instance-bad', 'GET', ARQ + '?instance=vm1', None, {}, 400,
     'instance'),
    ('arq-bind-state-bad', 'GET', ARQ + '?bind_state=bound', None, {}, 400,
     'bind_state'),
    ('arq-limit-zero', 'GET', ARQ + '?limit=0', None, {}, 400, 'limit'),
    ('arq-get-unknown', 'GET', ARQ + '/' + UNKNOWN, None, {}, 404, UNKNOWN),
    ('arq-get-not-uuid', 'GET', ARQ + '/arq1', None, {}, 404, 'arq1'),
    ('arq-put', 'PUT', ARQ, {}, {}, 405, 'PUT'),
    # Binding and unbinding.
    ('arq-patch-array', 'PATCH', ARQ, [], {}, 400, 'object'),
    ('arq-patch-empty', 'PATCH', ARQ, {}, {}, 400, 'object'),
    ('arq-patch-key-not-uuid', 'PATCH', ARQ, {'arq1': bind()[ARQ_UUID]}, {},
     400, 'arq1'),
    ('arq-patch-ops-object', 'PATCH', ARQ, {ARQ_UUID: {}}, {}, 400, 'list'),
    ('arq-patch-ops-empty', 'PATCH', ARQ, {ARQ_UUID: []}, {}, 400, 'list'),
    ('arq-patch-op-string', 'PATCH', ARQ, {ARQ_UUID: ['add']}, {}, 400,
     'object'),
    ('arq-patch-op-replace', 'PATCH', ARQ, {ARQ_UUID: [
        {'op': 'replace', 'path': '/hostname', 'value': 'h'}]}, {}, 400,
     'replace'),
    ('arq-patch-path-state', 'PATCH', ARQ, {ARQ_UUID: [
        {'op': 'add', 'path': '/state', 'value': 'Bound'}]}, {}, 400,
     '/state'),
    ('arq-patch-mixed', 'PATCH', ARQ, {ARQ_UUID: bind()[ARQ_UUID] + [
        {'op': 'remove', 'path': '/hostname'}]}, {}, 400, 'not both'),
    ('arq-patch-no-rp', 'PATCH', ARQ, bind('device_rp_uuid'), {}, 400,
     '/device_rp_uuid'),
    ('arq-patch-rp-bad', 'PATCH', ARQ, bind(device_rp_uuid='rp1'), {}, 400,
     'device_rp_uuid'),
    ('arq-patch-instance-bad', 'PATCH', ARQ, bind(instance_uuid=7), {}, 400,
     'instance_uuid'),
    ('arq-patch-hostname-empty', 'PATCH', ARQ, bind(hostname=''), {}, 400,
     'hostname'),
    ('arq-patch-hostname-number', 'PATCH', ARQ, bind(hostname=1), {}, 400,
     'hostname'),
    ('arq-patch-no-value', 'PATCH', ARQ, bind(hostname=_DROP), {}, 400,
     'value'),
    ('arq-patch-twice', 'PATCH', ARQ, {ARQ_UUID: bind()[ARQ_UUID] + [
        {'op': 'add', 'path': '/hostname', 'value': 'h2'}]}, {}, 400,
     'twice'),
    ('arq-patch-unknown', 'PATCH', ARQ, {UNKNOWN: bind()[ARQ_UUID]}, {},
     404, UNKNOWN),
    ('arq-patch-item-other', 'PATCH', ARQ + '/' + ARQ_UUID,
     {UNKNOWN: bind()[ARQ_UUID]}, {}, 400, UNKNOWN),
    ('arq-patch-item-not-uuid', 'PATCH', ARQ + '/arq1', bind(), {}, 400,
     'arq1'),
    ('arq-patch-project-2.0', 'PATCH', ARQ, {ARQ_UUID: bind()[ARQ_UUID] + [
        {'op': 'add', 'path': '/project_id', 'value': 'p2'}]}, {}, 406,
     '2.1'),
    ('arq-patch-project-empty', 'PATCH', ARQ, {ARQ_UUID: bind()[ARQ_UUID] + [
        {'op': 'add', 'path': '/project_id', 'value': ''}]},
     {'OpenStack-API-Version': 'accelerator 2.1'}, 400, 'project_id'),
    ('arq-unbind-initial', 'PATCH', ARQ, {ARQ_UUID: [
        {'op': 'remove', 'path': '/hostname'}]}, {}, 409, 'Initial'),
    # Deleting.
    ('arq-delete-nothing', 'DELETE', ARQ, None, {}, 400, 'arqs='),
    ('arq-delete-both', 'DELETE',
     ARQ + '?arqs=%s&instance=%s' % (ARQ_UUID, INSTANCE), None, {}, 400,
     'either'),
    ('arq-delete-arqs-empty', 'DELETE', ARQ + '?arqs=,', None, {}, 400,
     'arqs='),
    ('arq-delete-arqs-bad', 'DELETE', ARQ + '?arqs=arq1', None, {}, 400,
     'arq1'),
    ('arq-delete-some-unknown', 'DELETE',
     ARQ + '?arqs=%s,%s' % (ARQ_UUID, UNKNOWN), None, {}, 404, UNKNOWN),
    ('arq-delete-instance-bad', 'DELETE', ARQ + '?instance=vm1', None, {},
     400, 'instance'),
    ('arq-delete-item-unknown', 'DELETE', ARQ + '/' + UNKNOWN, None, {}, 404,
     UNKNOWN),
    ('arq-delete-item-not-uuid', 'DELETE', ARQ + '/arq1', None, {}, 404,
     'arq1'),
    # What no name, uuid or filter can hold: NUL (PostgreSQL refuses it
    # in text) and bytes that are not UTF-8.
    ('nul-in-path', 'GET', DP + '/a%00b', None, {}, 400, 'NUL'),
    ('nul-in-path-delete', 'DELETE', DP + '/a%00b', None, {}, 400, 'NUL'),
    ('nul-in-filter', 'GET', DEV + '?type=a%00b', None, {}, 400, 'NUL'),
    ('nul-in-filter-name', 'GET', DEP + '?na%00me=x', None, {}, 400, 'NUL'),
    ('nul-in-body-value', 'POST', DP,
     [profile(description='a\x00b')], {}, 400, 'NUL'),
    ('nul-in-body-key', 'POST', ARQ,
     {'device_profile_name': 'existing', 'x\x00': 1}, {}, 400, 'NUL'),
    ('nul-in-arq-profile-name', 'POST', ARQ,
     {'device_profile_name': 'a\x00b'}, {}, 400, 'NUL'),
    ('path-not-utf8', 'GET', DP + '/%FF', None, {}, 400, 'UTF-8'),
    ('query-not-utf8', 'GET', DEV + '?vendor=%FF', None, {}, 400, 'UTF-8'),
    ('body-nested-too-deep', 'POST', DP, b'[' * 100000, {}, 400,
     'nests deeper'),
    ('filter-given-twice', 'GET', DEV + '?type=GPU&type=FPGA', None, {},
     400, 'at most once'),
    ('limit-given-twice', 'GET', DP + '?limit=1&limit=2', None, {}, 400,
     'at most once'),
]


@pytest.fixture(scope='module')
def app_and_db(module_db_url):
    conf = conftest.make_conf(module_db_url)
    db = session.Database(conf)
    app = webtest.TestApp(api_app.build_app(conf, db))
    # One profile exists, so that deletes naming it next to an unknown
    # name must leave it in place.
    app.post_json(DP, [{'name': 'existing', 'groups': [GOOD_GROUP]}])
    arq, = app.post_json(ARQ, {'device_profile_name': 'existing'}).json[
        'arqs']
    # The fake driver's inventory, under uuids the cases can name.
    device, = inventory_rows.add_host(db.engine, 'host1',
                                      inventory_rows.fake_devices())
    deployable = device.deployables['FakeDevice']
    with db.engine.begin() as conn:
        for model, old, new in (
                (models.Device, device.uuid, DEVICE),
                (models.Deployable, deployable.uuid, DEPLOYABLE),
                (models.Attribute, deployable.attributes['rc'], ATTRIBUTE),
                (models.ExtendedAcceleratorRequest, arq['uuid'], ARQ_UUID)):
            conn.execute(sa.update(model).where(model.uuid == old).values(
                uuid=new))
    yield app, db
    db.dispose()


def snapshot(db):
    """Every row of every table, to compare before and after a request."""
    with db.engine.connect() as conn:
        return {
            table.name: sorted(
                tuple(str(v) for v in row)
                for row in conn.execute(sa.select(table)))
            for table in models.Base.metadata.sorted_tables}


def send(app, method, path, body, headers):
    headers = dict(headers)
    if isinstance(body, bytes):
        params = body
        headers.setdefault('Content-Type', 'application/json')
    elif method in ('POST', 'PUT', 'PATCH'):
        params = json.dumps(body).encode()
        headers.setdefault('Content-Type', 'application/json')
    else:
        params = ''
    if headers.get('Content-Type') == '':
        del headers['Content-Type']
    return app.request(path, method=method, body=params or b'',
                       headers=headers, expect_errors=True)


@pytest.mark.parametrize(
    'method,path,body,headers,status,word',
    [case[1:] for case in CASES], ids=[case[0] for case in CASES])
def test_malformed_request_is_refused_cleanly(
        app_and_db, method, path, body, headers, status, word):
    app, db = app_and_db
    before = snapshot(db)

    response = send(app, method, path, body, headers)

    assert response.status_int == status, response.body
    assert response.content_type == 'application/json'
    message = response.json['error_message']
    # A plain sentence, not a JSON document inside a string.
    assert message.endswith('.') and len(message) > 15, message
    assert not message.lstrip().startswith(('{', '[')), message
    assert word in message, message
    assert snapshot(db) == before


def test_case_ids_are_unique():
    ids = [case[0] for case in CASES]
    assert len(ids) == len(set(ids))
