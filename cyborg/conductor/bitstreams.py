"""Which Glance image to program into an FPGA for a device profile group.

A group asks for a bitstream with ``accel:`` keys, each matched against
one image property of the bitstream metadata convention
(``REQUEST_PROPERTIES``):

==========================  =============================================
``accel:bitstream_id``      ``bs-uuid`` or, when no image has that
                            ``bs-uuid``, the Glance image id
``accel:bitstream_name``    ``bs-name``
``accel:function_id``       ``function_uuid``
``accel:function_name``     ``function_name``
==========================  =============================================

Several keys in one group must all hold. Glance does the filtering on
these properties (tag ``FPGA``, status ``active``); a UUID is looked up
as the canonical UUID the spec writes and, failing that, as the 32 hex
digits OPAE prints (``UUID_SPELLINGS``).

Among the images Glance finds, one fits the target FPGA when (the rules
of ``RULES``, each a pure function of the image and ``FPGAFacts``):

- vendor: the image's ``vendor`` is the device's PCI vendor id (any case,
  with or without ``0x``) or one of its names: ``pci.VENDOR_TRAIT_NAMES``,
  ``VENDOR_ALIASES``, the PCI name the driver reported; a name may be
  longer than that ("Intel Corporation" is ``INTEL``);
- board: the image's ``board`` is the device's PCI product id (any case,
  with or without ``0x``), its model, or consecutive words of its model
  ("U200" fits "Alveo U200 XDMA Platform");
- region: an image with a ``region_uuid`` needs the device to report the
  same region (the ``region_uuid`` attribute of its deployable; spelled
  either way);
- shell: a partial bitstream (``shell_id`` set) needs its shell. When the
  device reports the shell it runs (the deployable attribute ``shell_id``,
  the ``bs-uuid`` of the loaded shell) that shell must be the one; when it
  does not, the image must name a ``region_uuid`` that the device has,
  because a region id is generated with the shell that provides it.
  Binding never loads a shell first: replacing the shell erases whatever
  every region of the card holds.

When several images fit, the highest ``version`` wins (compared part by
part, numbers as numbers). Copies of one bitstream (the same ``bs-uuid``)
tied at that version are interchangeable: the newest upload wins, then the
smallest image id, so the choice is deterministic. Two different
bitstreams tied at the highest version are refused as ambiguous: the
operator must say which by its ``bs-uuid``, or retire one.
"""

import dataclasses
import re
import uuid

from cyborg import exception
from cyborg.accelerator.drivers import pci
from cyborg.accelerator.drivers import traits

ACCEL = 'accel:'
# accel: key of a device profile group -> image property it is matched to.
REQUEST_PROPERTIES = (
    ('bitstream_id', 'bs-uuid'),
    ('bitstream_name', 'bs-name'),
    ('function_id', 'function_uuid'),
    ('function_name', 'function_name'),
)
UUID_KEYS = frozenset(('bitstream_id', 'function_id'))

# Names a vendor's bitstreams may carry besides pci.VENDOR_TRAIT_NAMES:
# Xilinx is part of AMD; Intel's FPGAs were and are again sold as Altera.
VENDOR_ALIASES = {
    '10ee': ('AMD',),
    '8086': ('ALTERA',),
}

_NOT_NAME = re.compile(r'[^A-Z0-9]+')


class BitstreamNotFound(exception.NotFound):
    code = 'cyborg.bitstream.not_found'


class BitstreamAmbiguous(exception.Conflict):
    code = 'cyborg.bitstream.ambiguous'


# -- spellings ----------------------------------------------------------


def uuid_hex(value):
    """32 lower-case hex digits of a UUID written either way, or None."""
    if not value:
        return None
    try:
        return uuid.UUID(str(value).strip()).hex
    except ValueError:
        return None


def _same_uuid(left, right):
    left_hex, right_hex = uuid_hex(left), uuid_hex(right)
    if left_hex and right_hex:
        return left_hex == right_hex
    return str(left).strip().lower() == str(right).strip().lower()


def hex_id(value):
    """A PCI id as lower-case hex without ``0x``: '0x10EE' -> '10ee'."""
    text = str(value or '').strip().lower()
    if text.startswith('0x'):
        text = text[2:]
    return text


def _words(text):
    return tuple(word for word in _NOT_NAME.split(str(text or '').upper())
                 if word)


def name_key(text):
    """A vendor name as compared: 'Xilinx, Inc.' -> 'XILINX_INC'."""
    return '_'.join(_words(text))


def spell_canonical(value):
    return str(uuid.UUID(value))


def spell_hex(value):
    return uuid.UUID(value).hex


# How a UUID of a request is written in the Glance query, in order.
UUID_SPELLINGS = (spell_canonical, spell_hex)


# -- what was asked -------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class BitstreamRequest:
    """The ``accel:`` bitstream keys of one device profile group."""

    bitstream_id: str | None = None
    bitstream_name: str | None = None
    function_id: str | None = None
    function_name: str | None = None

    def asked(self):
        """``[(accel key, image property, value)]`` for the keys given."""
        return [(key, prop, getattr(self, key))
                for key, prop in REQUEST_PROPERTIES
                if getattr(self, key) is not None]

    def describe(self):
        return ', '.join('%s%s=%s' % (ACCEL, key, value)
                         for key, _, value in self.asked())

    def glance_queries(self):
        """The property filters to ask Glance, one query after another
        until one finds something."""
        queries = []
        for spell in UUID_SPELLINGS:
            queries.append({prop: spell(value) if key in UUID_KEYS
                            else value
                            for key, prop, value in self.asked()})
        if self.bitstream_id is not None:
            # Not a bs-uuid: maybe the image's own id.
            by_id = {prop: value for key, prop, value in self.asked()
                     if key != 'bitstream_id'}
            by_id['id'] = spell_canonical(self.bitstream_id)
            queries.append(by_id)
        unique = []
        for query in queries:
            if query not in unique:
                unique.append(query)
        return unique

    def matches(self, image):
        """Whether the image has every property asked (UUIDs either way)."""
        props = image.get('properties', {})
        for key, prop, value in self.asked():
            if key == 'bitstream_id' and _same_uuid(image.get('id'), value):
                continue
            if prop not in props:
                return False
            if key in UUID_KEYS:
                if not _same_uuid(props[prop], value):
                    return False
            elif props[prop] != value:
                return False
        return True


def requested(group):
    """The bitstream a device profile group asks for, or None.

    ``group`` maps ``resources:``, ``trait:`` and ``accel:`` keys to
    values, as stored on device profile creation (which checked them).
    """
    values = {}
    for key, _ in REQUEST_PROPERTIES:
        value = group.get(ACCEL + key)
        if value is None:
            continue
        value = str(value).strip()
        if key in UUID_KEYS:
            value = str(uuid.UUID(value))
        values[key] = value
    return BitstreamRequest(**values) if values else None


# -- the target FPGA ------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FPGAFacts:
    """What the bitstream rules need to know of the target FPGA."""

    vendor_id: str
    model: str = ''
    product_id: str | None = None
    region_uuid: str | None = None
    shell_id: str | None = None
    vendor_name: str | None = None

    @classmethod
    def from_device(cls, device, attributes=None):
        """From a ``devices`` row (or a dict of its columns) and the
        attributes of the deployable being bound (``{key: value}``)."""
        def column(name):
            if isinstance(device, dict):
                return device.get(name)
            return getattr(device, name, None)

        attributes = attributes or {}
        std = column('std_board_info') or {}
        vendor_info = column('vendor_board_info') or {}
        return cls(
            vendor_id=hex_id(column('vendor') or std.get('vendor_id')),
            model=column('model') or '',
            product_id=hex_id(std.get('product_id')) or None,
            region_uuid=attributes.get('region_uuid') or None,
            shell_id=attributes.get('shell_id') or None,
            vendor_name=vendor_info.get('vendor_name') or None)

    def vendor_names(self):
        """The name keys the device's vendor goes by."""
        names = set()
        known = pci.VENDOR_TRAIT_NAMES.get(self.vendor_id)
        if known:
            names.add(known)
        names.update(VENDOR_ALIASES.get(self.vendor_id, ()))
        if self.vendor_name:
            names.add(name_key(self.vendor_name))
            names.update(_words(self.vendor_name)[:1])
        return names

    def describe(self):
        vendor = self.vendor_id
        known = pci.VENDOR_TRAIT_NAMES.get(self.vendor_id)
        if known:
            vendor = '%s (%s)' % (vendor, known)
        parts = ['vendor %s' % vendor, 'model %r' % self.model]
        if self.product_id:
            parts.append('product id %s' % self.product_id)
        parts.append('region %s' % (self.region_uuid or 'unknown'))
        parts.append('shell %s' % (self.shell_id or 'unknown'))
        return 'the FPGA (%s)' % ', '.join(parts)


# -- the rules: each returns None when the image fits, else why not -------


def _label(image):
    name = image.get('properties', {}).get('bs-name') or image.get('name')
    return 'image %s%s' % (image['id'], ' (%s)' % name if name else '')


def vendor_fits(image_vendor, facts):
    if hex_id(image_vendor) == facts.vendor_id:
        return True
    key = name_key(image_vendor)
    if not key:
        return False
    names = facts.vendor_names()
    return key in names or key.split('_')[0] in names


def board_fits(image_board, facts):
    if facts.product_id and hex_id(image_board) == facts.product_id:
        return True
    board = _words(image_board)
    model = _words(facts.model)
    if not board:
        return False
    return any(model[start:start + len(board)] == board
               for start in range(len(model) - len(board) + 1))


def check_usable(image, facts):
    if image.get('status') != 'active':
        return 'is %s, not active' % image.get('status')
    if 'FPGA' not in (image.get('tags') or ()):
        return 'is not tagged FPGA'
    return None


def check_vendor(image, facts):
    vendor = image['properties'].get('vendor')
    if not vendor:
        return 'does not say which vendor it is for'
    if not vendor_fits(vendor, facts):
        return 'is for vendor %r' % vendor
    return None


def check_board(image, facts):
    board = image['properties'].get('board')
    if not board:
        return 'does not say which board it is for'
    if not board_fits(board, facts):
        return 'is for board %r' % board
    return None


def check_region(image, facts):
    region = image['properties'].get('region_uuid')
    if not region:
        return None
    if not facts.region_uuid:
        return ('is built for region %s and the device reports no region'
                % region)
    if not _same_uuid(region, facts.region_uuid):
        return 'is built for region %s' % region
    return None


def check_shell(image, facts):
    props = image['properties']
    shell = props.get('shell_id')
    if not shell:
        return None
    if facts.shell_id:
        if _same_uuid(shell, facts.shell_id):
            return None
        return 'needs shell %s' % shell
    region = props.get('region_uuid')
    if region and facts.region_uuid and _same_uuid(region,
                                                   facts.region_uuid):
        return None
    return ('is a partial bitstream for shell %s, and the device reports '
            'neither which shell it runs nor a region that shell provides'
            % shell)


RULES = (check_usable, check_vendor, check_board, check_region,
         check_shell)


def mismatch(image, facts):
    """Why ``image`` does not fit the FPGA, or None when it does."""
    for rule in RULES:
        reason = rule(image, facts)
        if reason:
            return reason
    return None


# -- choosing ------------------------------------------------------------


def version_key(version):
    """'2.10' > '2.9' > '2.9rc1' > '2' > ''; numbers compare as numbers.

    A number outranks the end of a version, which outranks text, so that
    '1.0.1' > '1.0' > '1.0rc1'.
    """
    parts = re.findall(r'\d+|[A-Za-z]+', str(version or ''))
    return tuple((2, int(part)) if part.isdigit() else (0, part.lower())
                 for part in parts) + ((1,),)


def _identity(image):
    bs_uuid = image['properties'].get('bs-uuid')
    return uuid_hex(bs_uuid) or bs_uuid or image['id']


def pick(images, request, facts):
    """The image to program among ``images`` (what Glance found).

    Raises ``BitstreamNotFound`` or ``BitstreamAmbiguous``.
    """
    images = [image for image in images if request.matches(image)]
    if not images:
        raise BitstreamNotFound(
            'No active Glance image tagged FPGA matches %s, so nothing can '
            'be programmed into %s.' % (request.describe(),
                                        facts.describe()))
    fitting = []
    refused = []
    for image in images:
        reason = mismatch(image, facts)
        if reason:
            refused.append('%s %s' % (_label(image), reason))
        else:
            fitting.append(image)
    if not fitting:
        raise BitstreamNotFound(
            '%d Glance image%s match%s %s, but none fits %s: %s.' % (
                len(images), '' if len(images) == 1 else 's',
                'es' if len(images) == 1 else '', request.describe(),
                facts.describe(), '; '.join(refused)))
    best = max(version_key(image['properties'].get('version'))
               for image in fitting)
    top = sorted((image for image in fitting
                  if version_key(image['properties'].get('version')) == best),
                 key=lambda image: image['id'])
    different = {_identity(image) for image in top}
    if len(different) > 1:
        raise BitstreamAmbiguous(
            '%d different bitstreams fit %s and match %s at the same '
            'version: %s. Ask for one by accel:bitstream_id (its bs-uuid), '
            'or retire the others.' % (
                len(different), facts.describe(), request.describe(),
                ', '.join('%s with bs-uuid %s' % (
                    _label(image),
                    image['properties'].get('bs-uuid', 'unset'))
                    for image in top)))
    # Copies of one bitstream: the newest upload, then the smallest id.
    newest = max(image.get('created_at') or '' for image in top)
    return min((image for image in top
                if (image.get('created_at') or '') == newest),
               key=lambda image: image['id'])


def find_candidates(glance, request):
    """Ask Glance, query after query, until one finds some images."""
    for query in request.glance_queries():
        found = glance.find_bitstreams(**query)
        if found:
            return found
    return []


def choose_bitstream(glance, request, facts):
    """The Glance image (``GlanceClient.find_bitstreams`` dict) to program
    into the FPGA described by ``facts`` for ``request``.

    Raises ``BitstreamNotFound`` or ``BitstreamAmbiguous`` with a sentence
    that says what was asked and what the device is.
    """
    return pick(find_candidates(glance, request), request, facts)


def function_trait(image):
    """The Placement trait the FPGA carries once ``image`` is loaded:
    ``CUSTOM_FPGA_FUNCTION_ID_<32 upper-case hex digits>``, or None when
    the image names no (valid) ``function_uuid``."""
    function = uuid_hex(image.get('properties', {}).get('function_uuid'))
    if function is None:
        return None
    return traits.custom('FPGA_FUNCTION_ID', function)
