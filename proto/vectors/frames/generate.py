#!/usr/bin/env python3
"""Writes the frame vectors of proto/PROTOCOL.md and their MANIFEST.

Each vector is one frame (u32 LE length + msgpack body) in a .bin file. Valid
bodies are encoded with the Python msgpack package (an encoder independent of the
C codec); malformed ones are written byte by byte. Run from anywhere:

    python3 proto/vectors/frames/generate.py

MANIFEST lines are `file verdict expect context`: verdict is accept or reject;
for accept, expect is the message kind and context the request an "ok" answers
("-" otherwise); for reject, expect is the error every implementation must
report (frame_max is the default, 1 MiB). The output is deterministic.
"""
import os
import struct

import msgpack

HERE = os.path.dirname(os.path.abspath(__file__))
FRAME_MAX = 1 << 20
entries = []


def frame(body: bytes) -> bytes:
    return struct.pack('<I', len(body)) + body


def u64s(*vals) -> bytes:
    return b''.join(struct.pack('<Q', v) for v in vals)


def pack(obj) -> bytes:
    return msgpack.packb(obj, use_bin_type=True)


def emit(name, data, verdict, expect, context='-', note=''):
    with open(os.path.join(HERE, name), 'wb') as f:
        f.write(data)
    entries.append((name, verdict, expect, context, note))


def ok(name, obj, context='-', note=''):
    emit(name, frame(pack(obj)), 'accept', obj['kind'], context, note)


def bad(name, data, code, context='-', note=''):
    emit(name, data, 'reject', code, context, note)


dense = {'kind': 'dense', 'dtype': '<f4', 'item_shape': [2, 4], 'codec': 'zstd'}
ragged = {'kind': 'ragged', 'dtype': '<i4', 'ndim': 1, 'codec': 'zstd_dict'}
limits = {'frame_max': FRAME_MAX, 'handles_max': 1024, 'shm_bytes_max': 4 << 30,
          'loaders_max': 64, 'pipeline_max': 64, 'fds_per_frame_max': 64,
          'streams_max': 32, 'prefetch_max': 64}
stats = {'records': 10, 'live_bytes': 320, 'chunk_bytes': 400, 'reclaimable': 80,
         'logic_bytes': 320}

# ---- requests, one per kind ----------------------------------------------
ok('req-hello.bin', {'kind': 'hello', 'id': 1, 'min_version': 1, 'max_version': 1,
                     'features': ['loader'], 'client': 'vectors'})
ok('req-dataset_create-dense.bin', {'kind': 'dataset_create', 'id': 2, 'schema': dense})
ok('req-dataset_create-ragged-dict.bin', {'kind': 'dataset_create', 'id': 3, 'schema': ragged,
                                          'dict_bytes': 4096}, note='2 descriptors: dir, dict')
ok('req-dataset_open.bin', {'kind': 'dataset_open', 'id': 4, 'writable': True})
ok('req-msset_open.bin', {'kind': 'msset_open', 'id': 5, 'streams': ['joint', 'label', 'token']})
ok('req-info.bin', {'kind': 'info', 'id': 6, 'handle': 1})
ok('req-buffer_open.bin', {'kind': 'buffer_open', 'id': 7, 'bytes': 1 << 20})
ok('req-read.bin', {'kind': 'read', 'id': 8, 'handle': 1, 'buffer': 2, 'offset': 0,
                    'indices': u64s(7, 3, 7)})
ok('req-append-dense.bin', {'kind': 'append', 'id': 9, 'handle': 1, 'offset': 0, 'count': 4,
                            'record_bytes': 32, 'dtype': '<f4', 'item_shape': [2, 4]})
ok('req-append-ragged.bin', {'kind': 'append', 'id': 10, 'handle': 1, 'sizes': u64s(28, 20),
                             'dtype': '<i4', 'ndim': 1})
ok('req-append-set.bin', {'kind': 'append', 'id': 11, 'handle': 3, 'streams': [
    {'name': 'joint', 'offset': 0, 'count': 2, 'record_bytes': 32, 'dtype': '<f4',
     'item_shape': [2, 4]},
    {'name': 'label', 'offset': 64, 'count': 2, 'record_bytes': 8, 'dtype': '<i8',
     'item_shape': []}]})
ok('req-delete.bin', {'kind': 'delete', 'id': 12, 'handle': 1, 'indices': u64s(0, 5)})
ok('req-compact.bin', {'kind': 'compact', 'id': 13, 'handle': 1})
ok('req-stats.bin', {'kind': 'stats', 'id': 14, 'handle': 1})
ok('req-sync.bin', {'kind': 'sync', 'id': 15, 'handle': 1})
ok('req-verify.bin', {'kind': 'verify', 'id': 16, 'handle': 1})
ok('req-train_dict-handle.bin', {'kind': 'train_dict', 'id': 17, 'tier': 'balanced',
                                 'handle': 1})
ok('req-train_dict-memfd.bin', {'kind': 'train_dict', 'id': 18, 'tier': 'max',
                                'sizes': u64s(100, 200, 300)})
ok('req-install_dict.bin', {'kind': 'install_dict', 'id': 19, 'handle': 1, 'dict_bytes': 4096})
ok('req-convert.bin', {'kind': 'convert', 'id': 24, 'to': 'loaderx-1.5.7'},
   note='3 descriptors: source dir, its meta.zr, new dir')
ok('req-status.bin', {'kind': 'status', 'id': 20})
ok('req-close.bin', {'kind': 'close', 'id': 21, 'handle': 1})
ok('req-loader_open.bin', {'kind': 'loader_open', 'id': 22,
                           'streams': [{'handle': 1}, {'handle': 2, 'capacity': 1 << 16}],
                           'sampler': 'cyclic', 'batch_size': 256, 'seed': 2**64 - 1,
                           'start_step': 10**9, 'rank': 1, 'world_size': 2, 'prefetch': 4,
                           'length': 60000, 'indices': True})
ok('req-release.bin', {'kind': 'release', 'loader': 4, 'ring': 9, 'slot': 0})
ok('req-release-telemetry.bin', {'kind': 'release', 'loader': 4, 'ring': 9, 'slot': 1,
                                 'wait_ns': 1500000, 'taken_ns': 123456789012345})
ok('req-loader_open-ctlring.bin', {'kind': 'loader_open', 'id': 26,
                                   'streams': [{'handle': 1}], 'sampler': 'iid',
                                   'batch_size': 32, 'seed': 0, 'start_step': 0, 'ctlring': True})
ok('req-doorbell.bin', {'kind': 'doorbell', 'loader': 4})
ok('req-status-loader.bin', {'kind': 'status', 'id': 24, 'loader': 4})
ok('req-metrics.bin', {'kind': 'metrics', 'id': 25})
ok('req-loader_close.bin', {'kind': 'loader_close', 'id': 23, 'loader': 4})
ok('req-loader_open-mixture.bin', {'kind': 'loader_open', 'id': 24,
                                   'sources': [{'streams': [{'handle': 1, 'name': 'img'},
                                                            {'handle': 2, 'name': 'label'}],
                                                'weight': 7},
                                               {'streams': [{'handle': 5, 'name': 'img'},
                                                            {'handle': 6, 'name': 'label'}],
                                                'weight': 3, 'sampler': 'iid', 'length': 1000}],
                                   'sampler': 'cyclic', 'batch_size': 256, 'seed': 7,
                                   'start_step': 0, 'provenance': True})
ok('req-steps_of.bin', {'kind': 'steps_of', 'id': 25, 'sampler': 'cyclic', 'n': 60000,
                        'batch_size': 256, 'seed': 7, 'world_size': 4, 'record': 12345,
                        'start': 0, 'stop': 10**6})
ok('req-steps_of-mixture.bin', {'kind': 'steps_of', 'id': 26, 'sampler': 'cyclic',
                                'sources': [{'n': 60000, 'weight': 7},
                                            {'n': 1000, 'weight': 3, 'sampler': 'iid'}],
                                'source': 1, 'batch_size': 256, 'seed': 7, 'record': 999,
                                'start': 100, 'stop': 200, 'max_hits': 1000})

# ---- replies -------------------------------------------------------------
ok('ok-hello.bin', {'kind': 'ok', 'id': 1, 'version': 1, 'features': ['loader', 'msset'],
                    'daemon': 'zrecordd 0.1.0', 'limits': limits}, 'hello')
ok('ok-dataset_create.bin', {'kind': 'ok', 'id': 2, 'handle': 1, 'length': 0, 'schema': dense,
                             'has_dict': False, 'writable': True}, 'dataset_create')
ok('ok-dataset_open.bin', {'kind': 'ok', 'id': 4, 'handle': 1, 'length': 10, 'schema': ragged,
                           'has_dict': True, 'writable': False}, 'dataset_open')
ok('ok-msset_open.bin', {'kind': 'ok', 'id': 5, 'set': 3, 'length': 10, 'writable': True,
                         'streams': [{'name': 'joint', 'handle': 4, 'length': 10,
                                      'schema': dense, 'has_dict': False},
                                     {'name': 'token', 'handle': 5, 'length': 10,
                                      'schema': ragged, 'has_dict': True}]}, 'msset_open')
ok('ok-info.bin', {'kind': 'ok', 'id': 6, 'length': 10, 'schema': dense, 'has_dict': False,
                   'writable': True}, 'info')
ok('ok-buffer_open.bin', {'kind': 'ok', 'id': 7, 'buffer': 2, 'bytes': 1 << 20}, 'buffer_open')
ok('ok-read-dense.bin', {'kind': 'ok', 'id': 8, 'count': 3, 'offset': 0, 'bytes': 96,
                         'record_bytes': 32}, 'read')
ok('ok-read-ragged.bin', {'kind': 'ok', 'id': 8, 'count': 2, 'offset': 0, 'bytes': 56,
                          'offsets': u64s(16, 48), 'lengths': u64s(12, 4),
                          'shapes': u64s(3, 1)}, 'read')
ok('ok-append.bin', {'kind': 'ok', 'id': 9, 'first': 10, 'count': 4, 'length': 14}, 'append')
ok('ok-delete.bin', {'kind': 'ok', 'id': 12, 'length': 8}, 'delete')
ok('ok-compact.bin', dict({'kind': 'ok', 'id': 13}, **stats), 'compact')
ok('ok-stats.bin', dict({'kind': 'ok', 'id': 14}, **stats), 'stats')
ok('ok-sync.bin', {'kind': 'ok', 'id': 15}, 'sync')
ok('ok-verify.bin', {'kind': 'ok', 'id': 16, 'ok': False, 'records': 10, 'bad': 1,
                     'bad_indices': u64s(4)}, 'verify')
ok('ok-train_dict.bin', {'kind': 'ok', 'id': 17, 'dict_bytes': 112640}, 'train_dict')
ok('ok-install_dict.bin', {'kind': 'ok', 'id': 19}, 'install_dict')
ok('ok-convert.bin', {'kind': 'ok', 'id': 24, 'count': 1500,
                      'schema': {'kind': 'ragged', 'dtype': '<i4', 'ndim': 0, 'codec': 'zstd',
                                 'layout': 'loaderx-1.5.7'}}, 'convert')
ok('ok-status.bin', {'kind': 'ok', 'id': 20, 'daemon': 'zrecordd 0.1.0', 'uptime_ms': 1234,
                     'clients': 2, 'handles': 5, 'shm_bytes': 1 << 24, 'loaders': 1,
                     'batches': 100, 'gathers': 60, 'hits': 500, 'misses': 20,
                     'bytes': 1 << 30, 'evictions': 3,
                     'cache': {'budget': 1 << 30, 'bytes': 1 << 20, 'entries': 40},
                     'per_loader': [{'pid': 4242, 'loader': 4, 'sampler': 'cyclic',
                                     'batch_size': 256, 'streams': 2, 'step': 1100,
                                     'batches': 100, 'gathers': 60, 'hits': 500,
                                     'misses': 20, 'bytes': 1 << 30, 'evictions': 3,
                                     'shared': 40}]},
   'status')
span = {'span_ns': 10 ** 10, 'batches': 800, 'bytes': 800 << 20, 'waits': 800,
        'wait_ns': 3 * 10 ** 9, 'readies': 790, 'ready_ns': 10 ** 8, 'fills': 800,
        'fill_ns': 15 * 10 ** 9, 'lookup_ns': 10 ** 8, 'read_ns': 2 * 10 ** 8,
        'decode_ns': 14 * 10 ** 9, 'copy_ns': 7 * 10 ** 8, 'io_wait_ns': 0, 'queue_ns': 0,
        'device_bytes': 0, 'hits': 0, 'misses': 204800}
ok('ok-status-telemetry.bin', {
    'kind': 'ok', 'id': 24, 'daemon': 'zrecordd 0.1.0', 'uptime_ms': 60000, 'clients': 1,
    'handles': 2, 'shm_bytes': 1 << 24, 'loaders': 1, 'batches': 4800, 'gathers': 4800,
    'hits': 0, 'misses': 1228800, 'bytes': 4800 << 20, 'evictions': 0,
    'cache': {'budget': 0, 'bytes': 0, 'entries': 0},
    'per_loader': [{'pid': 4242, 'loader': 4, 'sampler': 'cyclic', 'batch_size': 256,
                    'streams': 1, 'step': 4800, 'batches': 4800, 'gathers': 4800, 'hits': 0,
                    'misses': 1228800, 'bytes': 4800 << 20, 'evictions': 0, 'shared': 0,
                    'uid': 1000, 'command': 'python3 train.py', 'dataset': '/data/train/x',
                    'telemetry': {'age_ms': 60000, 'verdict': 'data-bound', 'stage': 'decode',
                                  'reports': True, 'prefetch_depth': 2,
                                  'wait_p50_ns': 3500000, 'wait_p99_ns': 6000000,
                                  'ready_p50_ns': 20000, 'ready_p99_ns': 90000,
                                  'fill_p50_ns': 18000000, 'fill_p99_ns': 25000000,
                                  'total': dict(span, span_ns=6 * 10 ** 10), 'w1': span,
                                  'w10': span, 'w60': span, 'group': span}}]},
   'status', note='a loader with telemetry (STATUS with loader)')
ok('ok-metrics.bin', {'kind': 'ok', 'id': 25,
                      'text': '# HELP zrecord_loaders Open loaders.\n'
                              '# TYPE zrecord_loaders gauge\nzrecord_loaders 1\n'}, 'metrics')
bad('release-wait-negative.bin', frame(pack({'kind': 'release', 'loader': 1, 'ring': 1,
                                             'slot': 0, 'wait_ns': -1})), 'ZR_E_PROTO',
    note='wait_ns is a uint')
bad('status-loader-str.bin', frame(pack({'kind': 'status', 'id': 1, 'loader': 'x'})),
    'ZR_E_PROTO', note='loader is a u32')
ok('ok-close.bin', {'kind': 'ok', 'id': 21}, 'close')
ok('ok-loader_open.bin', {'kind': 'ok', 'id': 22, 'loader': 4, 'ring': 9, 'slots': 4, 'slot_bytes': 73728,
                          'ring_bytes': 294912, 'length': 60000,
                          'streams': [{'offset': 0, 'capacity': 8192},
                                      {'offset': 8192, 'capacity': 65536}]}, 'loader_open')
ok('ok-loader_open-ctlring.bin', {'kind': 'ok', 'id': 26, 'loader': 6, 'ring': 12, 'slots': 4,
                                  'slot_bytes': 98304, 'ring_bytes': 393216, 'length': 16384,
                                  'streams': [{'offset': 0, 'capacity': 98304}],
                                  'fingerprint': 7, 'ctlring': {'bytes': 4096, 'entries': 64}},
   'loader_open')
ok('ok-loader_close.bin', {'kind': 'ok', 'id': 23}, 'loader_close')
ok('ok-loader_open-mixture.bin', {'kind': 'ok', 'id': 24, 'loader': 5, 'ring': 11, 'slots': 4,
                                  'slot_bytes': 65536, 'ring_bytes': 262144, 'length': 61000,
                                  'streams': [{'offset': 0, 'capacity': 49152},
                                              {'offset': 49152, 'capacity': 2048}],
                                  'sources': [{'length': 60000}, {'length': 1000}]}, 'loader_open')
ok('ok-steps_of.bin', {'kind': 'ok', 'id': 25, 'hits': u64s(3, 1, 17, 240, 3, 200),
                       'next': 10**6}, 'steps_of')
ok('error-range.bin', {'kind': 'error', 'id': 8, 'code': 1007, 'name': 'ZR_E_RANGE',
                       'message': 'index 12 is out of range (length 10)', 'index': 12})
ok('error-buffer.bin', {'kind': 'error', 'id': 8, 'code': 1016, 'name': 'ZR_E_BUFFER',
                        'message': 'records need 4096 bytes, buffer has 1024', 'needed': 4096})

# ---- events --------------------------------------------------------------
ok('event-batch-dense.bin', {'kind': 'batch', 'loader': 4, 'ring': 9, 'slot': 1, 'step': 1001,
                             'streams': [{'offset': 73728, 'bytes': 8192}]})
ok('event-batch-ragged.bin', {'kind': 'batch', 'loader': 4, 'ring': 10, 'slot': 0, 'step': 1000,
                              'streams': [{'offset': 0, 'bytes': 8192},
                                          {'offset': 8192, 'bytes': 56,
                                           'offsets': u64s(8208, 8240),
                                           'lengths': u64s(12, 4), 'shapes': u64s(3, 1)}],
                              'indices': u64s(17, 4)})
ok('event-batch-mixture.bin', {'kind': 'batch', 'loader': 5, 'ring': 11, 'slot': 2, 'step': 9,
                               'streams': [{'offset': 131072, 'bytes': 12},
                                           {'offset': 180224, 'bytes': 24}],
                               'indices': u64s(41, 7, 998), 'source': bytes([0, 1, 1])})
ok('event-ring.bin', {'kind': 'ring', 'loader': 4, 'ring': 10, 'slots': 4, 'slot_bytes': 73728,
                      'ring_bytes': 294912})
ok('event-wake.bin', {'kind': 'wake', 'loader': 6})
ok('event-ring_close.bin', {'kind': 'ring_close', 'loader': 4, 'ring': 10})
ok('event-loader_end.bin', {'kind': 'loader_end', 'loader': 4, 'step': 1004, 'code': 1107,
                            'name': 'ZR_E_STALE', 'message': 'store appended to'})
ok('event-fault.bin', {'kind': 'fault', 'code': 1100, 'name': 'ZR_E_PROTO',
                       'message': 'body is a msgpack array, not a map'})

# ---- accepted oddities ---------------------------------------------------
ok('req-stats-unknown-keys.bin', {'kind': 'stats', 'id': 30, 'handle': 1,
                                  'future': {'x': [1.5, None, b'\x00']}, 'zz': -3},
   note='unknown keys of any type are ignored')
# wide encodings of small values: map32, str32 key, uint64 id
wide = (b'\xdf\x00\x00\x00\x03' + b'\xdb\x00\x00\x00\x04kind' + b'\xa5stats' +
        b'\xa2id' + b'\xcf' + (31).to_bytes(8, 'big') + b'\xa6handle' + b'\xce\x00\x00\x00\x01')
emit('req-stats-wide-encodings.bin', frame(wide), 'accept', 'stats', '-',
     'map32, str32 and uint64 for small values are fine')

# ---- frames --------------------------------------------------------------
bad('frame-empty-body.bin', struct.pack('<I', 0), 'ZR_E_PROTO', note='length 0')
bad('frame-over-limit.bin', struct.pack('<I', FRAME_MAX + 1) + b'\x80', 'ZR_E_LIMIT',
    note='refused from the prefix alone')
bad('frame-length-max.bin', struct.pack('<I', 0xffffffff), 'ZR_E_LIMIT')
bad('frame-short-header.bin', b'\x05\x00', 'ZR_E_PROTO', note='fewer than 4 bytes')
good = pack({'kind': 'status', 'id': 1})
bad('frame-truncated.bin', frame(good)[:-3], 'ZR_E_PROTO', note='body shorter than length')
bad('frame-bytes-after.bin', frame(good) + b'\x00', 'ZR_E_PROTO',
    note='a byte after the announced body')
bad('body-trailing.bin', frame(good + b'\xc0'), 'ZR_E_PROTO',
    note='a second object inside the body')

# ---- hostile declarations: every width of str, bin, ext, array, map ------
for name, head in [('array16', b'\xdc\xff\xff'), ('array32', b'\xdd\xff\xff\xff\xff'),
                   ('map16', b'\xde\xff\xff'), ('map32', b'\xdf\xff\xff\xff\xff'),
                   ('str8', b'\xd9\xff'), ('str16', b'\xda\xff\xff'),
                   ('str32', b'\xdb\xff\xff\xff\xff'), ('bin8', b'\xc4\xff'),
                   ('bin16', b'\xc5\xff\xff'), ('bin32', b'\xc6\xff\xff\xff\xff'),
                   ('ext8', b'\xc7\xff\x01'), ('ext16', b'\xc8\xff\xff\x01'),
                   ('ext32', b'\xc9\xff\xff\xff\xff\x01'), ('fixarray', b'\x9f'),
                   ('fixmap', b'\x8f'), ('fixstr', b'\xbf')]:
    bad('huge-%s.bin' % name, frame(head), 'ZR_E_PROTO',
        note='declares more than the bytes left')
    # the same, nested as a value inside a valid-looking map
    body = b'\x82\xa4kind\xa6status\xa2id' + head
    bad('huge-%s-nested.bin' % name, frame(body), 'ZR_E_PROTO')
bad('huge-array32-issue.bin', frame(b'\xdd\xff\x00\x00\x00'), 'ZR_E_PROTO',
    note='the five bytes of issue 4')
bad('reserved-c1.bin', frame(b'\x81\xa4kind\xc1'), 'ZR_E_PROTO', note='0xc1 is never used')
deep = b'\x81\xa1a' * 9 + b'\x00'
bad('deep-9.bin', frame(deep), 'ZR_E_PROTO', note='nine nested maps (limit 8)')
# depth 8 exactly: the body map plus seven nested maps under an unknown key
inner = b'\x81\xa1a' * 6 + b'\x80'
deep8 = b'\x84\xa4kind\xa5stats\xa2id\x01\xa6handle\x01\xa1x' + inner
emit('deep-8-accepted.bin', frame(deep8), 'accept', 'stats', '-', 'eight levels are allowed')
bad('deep-arrays.bin', frame(b'\x91' * 100 + b'\x00'), 'ZR_E_PROTO')
bad('objects-over-limit.bin', frame(pack({'kind': 'status', 'id': 1, 'x': [None] * 70000})),
    'ZR_E_LIMIT', note='65536 objects per body')
bad('map-65-keys.bin', frame(pack(dict({'kind': 'status', 'id': 1},
                                       **{'k%02d' % i: i for i in range(63)}))),
    'ZR_E_PROTO', note='64 entries per map')

# ---- shapes that are msgpack but not messages -----------------------------
bad('body-array.bin', frame(pack(['kind', 'status'])), 'ZR_E_PROTO', note='not a map')
bad('body-int.bin', frame(pack(7)), 'ZR_E_PROTO')
bad('body-nil.bin', frame(b'\xc0'), 'ZR_E_PROTO')
bad('key-int.bin', frame(b'\x82\xa4kind\xa6status\x01\x02'), 'ZR_E_PROTO', note='keys are str')
bad('key-duplicate.bin', frame(b'\x83\xa4kind\xa6status\xa2id\x01\xa2id\x02'), 'ZR_E_PROTO')
bad('key-too-long.bin', frame(pack({'kind': 'status', 'id': 1, 'k' * 33: 0})), 'ZR_E_PROTO')
bad('key-empty.bin', frame(pack({'kind': 'status', 'id': 1, '': 0})), 'ZR_E_PROTO')
bad('kind-missing.bin', frame(pack({'id': 1, 'handle': 1})), 'ZR_E_PROTO')
bad('kind-not-str.bin', frame(pack({'kind': 3, 'id': 1})), 'ZR_E_PROTO')
bad('kind-unknown.bin', frame(pack({'kind': 'frobnicate', 'id': 1})), 'ZR_E_UNKNOWN')
bad('id-missing.bin', frame(pack({'kind': 'stats', 'handle': 1})), 'ZR_E_PROTO')
bad('id-negative.bin', frame(pack({'kind': 'stats', 'id': -1, 'handle': 1})), 'ZR_E_PROTO')
bad('id-str.bin', frame(pack({'kind': 'stats', 'id': '1', 'handle': 1})), 'ZR_E_PROTO')
bad('event-with-id.bin', frame(pack({'kind': 'batch', 'id': 1, 'loader': 1, 'slot': 0,
                                     'step': 0, 'streams': []})), 'ZR_E_PROTO')
bad('ok-without-id.bin', frame(pack({'kind': 'ok'})), 'ZR_E_PROTO')
bad('read-handle-missing.bin', frame(pack({'kind': 'read', 'id': 1, 'buffer': 2,
                                           'indices': u64s(1)})), 'ZR_E_PROTO')
bad('read-handle-over-u32.bin', frame(pack({'kind': 'read', 'id': 1, 'handle': 2**32,
                                            'buffer': 2, 'indices': u64s(1)})), 'ZR_E_PROTO')
bad('read-indices-ragged-bin.bin', frame(pack({'kind': 'read', 'id': 1, 'handle': 1,
                                               'buffer': 2, 'indices': b'\x01' * 12})),
    'ZR_E_PROTO', note='12 bytes is not a whole number of u64')
bad('read-indices-array.bin', frame(pack({'kind': 'read', 'id': 1, 'handle': 1, 'buffer': 2,
                                          'indices': [1, 2, 3]})), 'ZR_E_PROTO',
    note='indices travel as bin, not as an array')
bad('hello-version-str.bin', frame(pack({'kind': 'hello', 'id': 1, 'min_version': '1',
                                         'max_version': 1})), 'ZR_E_PROTO')
bad('create-schema-no-codec.bin', frame(pack({'kind': 'dataset_create', 'id': 1,
                                              'schema': {'kind': 'dense', 'dtype': '<f4',
                                                         'item_shape': [2]}})), 'ZR_E_PROTO')
bad('create-item-shape-negative.bin', frame(pack({'kind': 'dataset_create', 'id': 1,
                                                  'schema': dict(dense, item_shape=[2, -4])})),
    'ZR_E_PROTO')
bad('loader-stream-not-map.bin', frame(pack({'kind': 'loader_open', 'id': 1, 'streams': [1],
                                             'sampler': 'iid', 'batch_size': 2, 'seed': 0,
                                             'start_step': 0})), 'ZR_E_PROTO')
bad('loader-seed-float.bin', frame(pack({'kind': 'loader_open', 'id': 1,
                                         'streams': [{'handle': 1}], 'sampler': 'iid',
                                         'batch_size': 2, 'seed': 1.0, 'start_step': 0})),
    'ZR_E_PROTO')
bad('loader-sources-weight-negative.bin',
    frame(pack({'kind': 'loader_open', 'id': 1, 'sources': [{'streams': [{'handle': 1}],
                                                             'weight': -1}],
                'sampler': 'iid', 'batch_size': 2, 'seed': 0, 'start_step': 0})), 'ZR_E_PROTO')
bad('loader-source-no-streams.bin',
    frame(pack({'kind': 'loader_open', 'id': 1, 'sources': [{'weight': 1}],
                'sampler': 'iid', 'batch_size': 2, 'seed': 0, 'start_step': 0})), 'ZR_E_PROTO')
bad('steps_of-no-record.bin', frame(pack({'kind': 'steps_of', 'id': 1, 'sampler': 'cyclic',
                                          'n': 10, 'batch_size': 2, 'seed': 0, 'start': 0,
                                          'stop': 5})), 'ZR_E_PROTO')
bad('ok-steps_of-hits-odd.bin', frame(pack({'kind': 'ok', 'id': 25, 'hits': b'\x00' * 12,
                                            'next': 5})), 'ZR_E_PROTO', 'steps_of')
bad('batch-no-streams.bin', frame(pack({'kind': 'batch', 'loader': 1, 'ring': 1, 'slot': 0,
                                          'step': 0})),
    'ZR_E_PROTO')
bad('release-slot-negative.bin', frame(pack({'kind': 'release', 'loader': 1, 'ring': 1,
                                              'slot': -1})),
    'ZR_E_PROTO')
bad('doorbell-no-loader.bin', frame(pack({'kind': 'doorbell'})), 'ZR_E_PROTO')
bad('ok-read-missing-count.bin', frame(pack({'kind': 'ok', 'id': 8, 'offset': 0, 'bytes': 0})),
    'ZR_E_PROTO', 'read')
bad('error-no-code.bin', frame(pack({'kind': 'error', 'id': 1, 'message': 'x'})), 'ZR_E_PROTO')

with open(os.path.join(HERE, 'MANIFEST'), 'w') as f:
    f.write('# Frame vectors of proto/PROTOCOL.md, written by generate.py.\n'
            '# file verdict expect context  (# note)\n'
            '# accept: expect is the kind; context is the request an "ok" answers.\n'
            '# reject: expect is the error code name, with frame_max = 1 MiB.\n')
    for name, verdict, expect, context, note in entries:
        line = '%-36s %-6s %-16s %s' % (name, verdict, expect, context)
        if note:
            line += '  # ' + note
        f.write(line.rstrip() + '\n')
