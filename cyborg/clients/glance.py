"""A small client of Glance's Images API v2, for FPGA bitstreams.

Bitstreams are Glance images tagged ``FPGA`` whose properties follow the
bitstream metadata convention (``bs-uuid``, ``bs-name``, ``vendor``,
``board``, ``shell_id``, ``region_uuid``, ``function_uuid``,
``function_name``, ``version``, ...). Two questions are asked of Glance:

- ``find_bitstreams(**properties)``: the active images tagged ``FPGA``
  whose properties have the given values. Glance v2 filters on any image
  property given as a query parameter
  (``GET /v2/images?tag=FPGA&status=active&function_uuid=...``), so the
  filtering happens in Glance; every page is read.
- ``download(image_id, dest_path)``: the image's data, streamed to a
  temporary file next to ``dest_path``, hashed on the way with the
  algorithm Glance names (``os_hash_algo``/``os_hash_value``, and the MD5
  ``checksum``), and renamed to ``dest_path`` only when every hash Glance
  gives matches. A failed or corrupted download leaves no file behind, and
  an image for which Glance gives no checksum at all is refused: a
  bitstream that cannot be verified is not loaded into hardware.

The client speaks HTTP through a keystoneauth ``Adapter`` built from the
``[glance]`` options, like the Placement client, rather than through
openstacksdk's image proxy: the proxy writes straight to the output file
(a failure leaves half a file) and downloads without verifying when Glance
gives no hash, and the service needs neither behaviour. Paths start with
``/v2``: the endpoint is the unversioned image endpoint that the service
catalog lists (leave ``[glance] version`` unset).
"""

import hashlib
import logging
import os
import tempfile
import time
import urllib.parse

from keystoneauth1 import adapter as ks_adapter
from keystoneauth1 import exceptions as ks_exceptions
from keystoneauth1 import loading as ks_loading
import requests

from cyborg import exception
from cyborg.conf import glance as glance_conf

LOG = logging.getLogger(__name__)

SERVICE_TYPE = 'image'
FPGA_TAG = 'FPGA'
DEFAULT_CHUNK_SIZE = 64 * 1024

# The fields of Glance's image schema; everything else an image shows is
# one of its (string-valued) additional properties.
IMAGE_FIELDS = frozenset((
    'id', 'name', 'status', 'visibility', 'protected', 'os_hidden',
    'checksum', 'os_hash_algo', 'os_hash_value', 'owner', 'size',
    'virtual_size', 'min_ram', 'min_disk', 'disk_format',
    'container_format', 'created_at', 'updated_at', 'tags', 'direct_url',
    'locations', 'self', 'file', 'schema', 'stores',
))
# The fields a found bitstream keeps, besides its properties.
KEPT_FIELDS = ('id', 'name', 'status', 'tags', 'size', 'checksum',
               'os_hash_algo', 'os_hash_value', 'created_at', 'updated_at')


class GlanceError(exception.CyborgError):
    """Glance could not be asked, or answered with an error."""

    status = 502
    code = 'cyborg.glance.error'


class ImageNotFound(GlanceError):
    # The image a caller named is not there: the caller's mistake.
    status = 404
    code = 'cyborg.glance.image_not_found'


class ChecksumMismatch(GlanceError):
    """The data downloaded is not what Glance says the image holds."""

    code = 'cyborg.glance.checksum_mismatch'


class UnverifiableImage(GlanceError):
    """Glance gives no checksum (or an unknown hash algorithm)."""

    code = 'cyborg.glance.unverifiable_image'


def bitstream(image):
    """The flat description of a Glance image that the service keeps.

    ``{'id', 'name', 'status', 'tags', 'size', 'checksum', 'os_hash_algo',
    'os_hash_value', 'created_at', 'updated_at', 'properties'}``, where
    ``properties`` maps each additional property to its value as a string.
    """
    found = {field: image.get(field) for field in KEPT_FIELDS}
    found['tags'] = list(image.get('tags') or ())
    found['properties'] = {
        key: value if isinstance(value, str) else str(value)
        for key, value in image.items()
        if key not in IMAGE_FIELDS and not key.startswith('os_glance')
        and value is not None}
    return found


def expected_hashes(image):
    """``[(algorithm, hex digest)]`` that the data of ``image`` must have."""
    expected = []
    if image.get('os_hash_algo') and image.get('os_hash_value'):
        expected.append((image['os_hash_algo'].lower(),
                         image['os_hash_value'].lower()))
    if image.get('checksum') and not any(a == 'md5' for a, _ in expected):
        expected.append(('md5', image['checksum'].lower()))
    return expected


def _hasher(algorithm, image_id):
    try:
        if algorithm == 'md5':
            return hashlib.md5(usedforsecurity=False)
        return hashlib.new(algorithm)
    except ValueError:
        raise UnverifiableImage(
            'Glance hashes image %s with %s, which this host cannot compute; '
            'refusing to use a bitstream that cannot be verified.'
            % (image_id, algorithm)) from None


class GlanceClient:
    """Finds FPGA bitstreams in Glance and downloads them, verified."""

    def __init__(self, adapter, chunk_size=DEFAULT_CHUNK_SIZE):
        self._adapter = adapter
        self.chunk_size = chunk_size

    @classmethod
    def from_conf(cls, conf, group=glance_conf.GROUP):
        """From the ``[glance]`` options; None when Glance is not set up.

        Glance is set up when the group has an ``auth_type`` (the catalog
        gives the endpoint) or an ``endpoint_override``.
        """
        options = conf[group]
        if not (options.auth_type or options.endpoint_override):
            return None
        auth = ks_loading.load_auth_from_conf_options(conf, group)
        session = ks_loading.load_session_from_conf_options(
            conf, group, auth=auth)
        adapter = ks_loading.load_adapter_from_conf_options(
            conf, group, session=session, auth=auth)
        return cls(adapter, chunk_size=options.download_chunk_size)

    @classmethod
    def from_session(cls, session, chunk_size=DEFAULT_CHUNK_SIZE,
                     **adapter_options):
        """From a keystoneauth session; options go to the Adapter."""
        adapter_options.setdefault('service_type', SERVICE_TYPE)
        return cls(ks_adapter.Adapter(session, **adapter_options),
                   chunk_size=chunk_size)

    # -- transport ------------------------------------------------------

    def _get(self, path, what, **kwargs):
        try:
            response = self._adapter.get(path, raise_exc=False, **kwargs)
        except (ks_exceptions.ClientException,
                requests.RequestException) as error:
            raise GlanceError('Cannot reach Glance to %s: %s'
                              % (what, error)) from error
        if response.status_code == 404:
            raise ImageNotFound('Glance could not %s: it has no such image '
                                '(GET %s answered 404).' % (what, path))
        if response.status_code >= 400:
            raise GlanceError('Glance refused to %s: GET %s answered %d %s'
                              % (what, path, response.status_code,
                                 response.text[:200].strip()))
        return response

    # -- questions ------------------------------------------------------

    def find_bitstreams(self, **properties):
        """The active images tagged FPGA whose properties have these values.

        Keys are image properties (``**{'bs-uuid': ...}``) or Glance's own
        filters such as ``id`` or ``name``; values are matched exactly.
        Returns a list of ``bitstream()`` dicts, in Glance's order (newest
        first).
        """
        query = [('tag', FPGA_TAG), ('status', 'active')]
        query.extend(sorted((key, str(value))
                            for key, value in properties.items()))
        path = '/v2/images?' + urllib.parse.urlencode(query)
        what = 'list FPGA bitstreams with %s' % (
            ', '.join('%s=%s' % item for item in sorted(properties.items()))
            or 'any properties')
        found = []
        seen = set()
        while path:
            page = self._get(path, what,
                             headers={'Accept': 'application/json'}).json()
            for image in page.get('images', ()):
                if image['id'] not in seen:
                    seen.add(image['id'])
                    found.append(bitstream(image))
            path = page.get('next')
        return found

    def get_bitstream(self, image_id):
        """The image ``image_id`` as ``bitstream()`` describes it.

        Raises ``ImageNotFound`` when Glance has no such image.
        """
        image = self._get('/v2/images/%s' % urllib.parse.quote(image_id),
                          'show image %s' % image_id,
                          headers={'Accept': 'application/json'}).json()
        return bitstream(image)

    def download(self, image_id, dest_path, image=None):
        """Write the data of ``image_id`` to ``dest_path``, verified.

        ``image`` is what ``find_bitstreams`` or ``get_bitstream`` returned
        for it (its checksums are the expected ones); without it the image
        is read from Glance first. Raises ``ChecksumMismatch`` when the data
        does not hash to what Glance gives, ``UnverifiableImage`` when
        Glance gives no checksum, ``ImageNotFound`` or ``GlanceError``
        otherwise; ``dest_path`` is then left as it was. Returns
        ``dest_path``.
        """
        if image is None:
            image = self.get_bitstream(image_id)
        expected = expected_hashes(image)
        if not expected:
            raise UnverifiableImage(
                'Glance gives no checksum for image %s; refusing to use a '
                'bitstream that cannot be verified.' % image_id)
        hashers = [(algorithm, value, _hasher(algorithm, image_id))
                   for algorithm, value in expected]
        directory = os.path.dirname(os.path.abspath(dest_path))
        os.makedirs(directory, exist_ok=True)
        started = time.monotonic()
        fd, partial = tempfile.mkstemp(
            dir=directory, prefix='.%s.' % os.path.basename(dest_path),
            suffix='.part')
        try:
            with os.fdopen(fd, 'wb') as out:
                response = self._get(
                    '/v2/images/%s/file' % urllib.parse.quote(image_id),
                    'download image %s' % image_id, stream=True,
                    headers={'Accept': 'application/octet-stream'})
                with response:
                    if response.status_code == 204:
                        raise GlanceError('Glance holds no data for image '
                                          '%s.' % image_id)
                    size = self._copy(response, out, hashers, image_id)
                out.flush()
                os.fsync(out.fileno())
            self._verify(image, image_id, size, hashers)
            os.replace(partial, dest_path)
        except BaseException:
            try:
                os.unlink(partial)
            except FileNotFoundError:
                pass
            raise
        LOG.info('Downloaded image %s (%d bytes, %s verified) to %s in '
                 '%.2f s', image_id, size,
                 ', '.join(algorithm for algorithm, _, _ in hashers),
                 dest_path, time.monotonic() - started)
        return dest_path

    def _copy(self, response, out, hashers, image_id):
        size = 0
        try:
            for chunk in response.iter_content(chunk_size=self.chunk_size):
                for _, _, hasher in hashers:
                    hasher.update(chunk)
                out.write(chunk)
                size += len(chunk)
        except requests.RequestException as error:
            raise GlanceError('The download of image %s broke off after %d '
                              'bytes: %s' % (image_id, size, error)) from error
        return size

    @staticmethod
    def _verify(image, image_id, size, hashers):
        if image.get('size') is not None and size != image['size']:
            raise ChecksumMismatch(
                'Downloaded %d bytes of image %s, but Glance says it holds '
                '%d; the download was discarded.'
                % (size, image_id, image['size']))
        for algorithm, value, hasher in hashers:
            actual = hasher.hexdigest()
            if actual != value:
                raise ChecksumMismatch(
                    'The data of image %s has %s %s, but Glance says %s; '
                    'the download was discarded.'
                    % (image_id, algorithm, actual, value))
