"""[glance] options: how the conductor and agents find and download FPGA
bitstreams kept as Glance images."""

from oslo_config import cfg

from cyborg.conf import service_client

GROUP = 'glance'

# Options of the bitstream lookup itself join this list.
opts = [
    cfg.StrOpt('bitstream_dir',
               default='$state_path/bitstreams',
               help='Directory where bitstreams downloaded from Glance are '
                    'written before a device is programmed with them. A '
                    'download goes to a temporary name in this directory '
                    'and is renamed only once its checksum matches the one '
                    'Glance gives, so a file found here is whole.'),
    cfg.IntOpt('download_chunk_size',
               default=64 * 1024,
               min=4096,
               help='Bytes read from Glance at a time while downloading a '
                    'bitstream (and hashed, and written).'),
]

_GROUP = service_client.ServiceClientGroup(
    GROUP, 'Glance image service client',
    'Where the image API is and the credentials used to call it. FPGA '
    'bitstreams are Glance images tagged FPGA whose properties follow the '
    'bitstream metadata convention (bs-uuid, vendor, board, region_uuid, '
    'function_uuid, ...). With neither auth_type nor endpoint_override set, '
    'Glance is not used and a device profile that asks for a bitstream '
    'cannot be bound.',
    service_type='image', extra_opts=opts, default_timeout=60)

register_opts = _GROUP.register_opts
list_opts = _GROUP.list_opts
