! Unit test of the Fortran module acx on one process, without MPI: every status constant against
! the C library's names, status strings and predicates, buffers round-tripped from Fortran arrays
! of each type, fill, copy, offsets, the bad-input statuses, and tokens (export, decode, encode,
! damaged records). Host device kind, process transport. Prints one line per check.
program test_fortran_bindings
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: output_unit
  use acx
  implicit none

  integer :: failures = 0, checks = 0
  type(acx_system) :: sys
  type(acx_device) :: dev
  integer(c_int) :: st

  call test_status()
  call acx_system_create(sys, threads=2)
  call acx_device_open(sys, dev, kind=ACX_DEVICE_KIND_HOST, transport=ACX_TRANSPORT_PROCESS, stat=st)
  call expect(st == ACX_OK, 'acx_device_open host/process: '//acx_status_name(st))
  if (st == ACX_OK) then
    call test_device()
    call test_round_trips()
    call test_fill_copy()
    call test_bad_input()
    call test_tokens()
    call acx_device_close(dev, stat=st)
    call expect(st == ACX_OK, 'acx_device_close: '//acx_status_name(st))
    call expect(.not. acx_associated(dev), 'the closed device handle is cleared')
  end if
  call acx_system_destroy(sys, timeout_ms=10000, stat=st)
  call expect(st == ACX_OK, 'acx_system_destroy: '//acx_status_name(st))

  write (output_unit, '(a,i0,a,i0,a)') 'test_fortran_bindings: ', checks - failures, ' of ', checks, ' checks passed'
  if (failures > 0) error stop 1

contains

  subroutine expect(cond, what)
    logical, intent(in) :: cond
    character(len=*), intent(in) :: what
    checks = checks + 1
    if (cond) then
      write (output_unit, '(a)') '  ok    '//what
    else
      failures = failures + 1
      write (output_unit, '(a)') '  FAIL  '//what
    end if
  end subroutine expect

  ! The module's constants must name the codes the C library names: a renumbered status in
  ! include/acx/status.h fails here.
  subroutine test_status()
    integer(c_int), parameter :: codes(*) = [ACX_OK, ACX_ERR_INVALID_ARG, ACX_ERR_NULL_ARG, &
      ACX_ERR_INVALID_STATE, ACX_ERR_NOT_SUPPORTED, ACX_ERR_BAD_DTYPE, ACX_ERR_OUT_OF_RANGE, ACX_ERR_OVERFLOW, &
      ACX_ERR_BAD_PARAM, ACX_ERR_NO_MEMORY, ACX_ERR_QUEUE_FULL, ACX_ERR_SYSTEM, ACX_ERR_TIMEOUT, &
      ACX_ERR_ACTOR_STOPPED, ACX_ERR_NAME_TAKEN, ACX_ERR_NOT_FOUND, ACX_ERR_ACTOR_FAILED, ACX_ERR_CANCELLED, &
      ACX_ERR_ESCALATED, ACX_ERR_SYSTEM_STOPPING, ACX_ERR_DEVICE, ACX_ERR_DEVICE_OOM, ACX_ERR_NO_DEVICE, &
      ACX_ERR_DEVICE_LOST, ACX_ERR_DEVICE_FATAL, ACX_ERR_DEVICE_UNAVAILABLE, ACX_ERR_STALE_BUFFER, &
      ACX_ERR_UNKNOWN_BUFFER, ACX_ERR_BAD_TOKEN, ACX_ERR_STALE_TOKEN, ACX_ERR_DENIED, ACX_ERR_WORLD_REBUILDING, &
      ACX_ERR_PEER_LOST, ACX_ERR_COLL_TIMEOUT, ACX_ERR_NCCL, ACX_ERR_MPI, ACX_ERR_BAD_LAUNCH, ACX_ERR_LIBRARY, &
      ACX_ERR_LIBRARY_INFO, ACX_ERR_COMPILE]
    character(len=26), parameter :: names(*) = [character(len=26) :: 'ACX_OK', 'ACX_ERR_INVALID_ARG', &
      'ACX_ERR_NULL_ARG', 'ACX_ERR_INVALID_STATE', 'ACX_ERR_NOT_SUPPORTED', 'ACX_ERR_BAD_DTYPE', &
      'ACX_ERR_OUT_OF_RANGE', 'ACX_ERR_OVERFLOW', 'ACX_ERR_BAD_PARAM', 'ACX_ERR_NO_MEMORY', 'ACX_ERR_QUEUE_FULL', &
      'ACX_ERR_SYSTEM', 'ACX_ERR_TIMEOUT', 'ACX_ERR_ACTOR_STOPPED', 'ACX_ERR_NAME_TAKEN', 'ACX_ERR_NOT_FOUND', &
      'ACX_ERR_ACTOR_FAILED', 'ACX_ERR_CANCELLED', 'ACX_ERR_ESCALATED', 'ACX_ERR_SYSTEM_STOPPING', &
      'ACX_ERR_DEVICE', 'ACX_ERR_DEVICE_OOM', 'ACX_ERR_NO_DEVICE', 'ACX_ERR_DEVICE_LOST', 'ACX_ERR_DEVICE_FATAL', &
      'ACX_ERR_DEVICE_UNAVAILABLE', 'ACX_ERR_STALE_BUFFER', 'ACX_ERR_UNKNOWN_BUFFER', 'ACX_ERR_BAD_TOKEN', &
      'ACX_ERR_STALE_TOKEN', 'ACX_ERR_DENIED', 'ACX_ERR_WORLD_REBUILDING', 'ACX_ERR_PEER_LOST', &
      'ACX_ERR_COLL_TIMEOUT', 'ACX_ERR_NCCL', 'ACX_ERR_MPI', 'ACX_ERR_BAD_LAUNCH', 'ACX_ERR_LIBRARY', &
      'ACX_ERR_LIBRARY_INFO', 'ACX_ERR_COMPILE']
    integer :: i, bad, code
    character(len=:), allocatable :: s, v
    bad = 0
    do i = 1, size(codes)
      if (acx_status_name(codes(i)) /= trim(names(i))) then
        bad = bad + 1
        write (output_unit, '(a,i0,a)') '        code ', codes(i), ' is '//acx_status_name(codes(i))// &
          ' in C, '//trim(names(i))//' in Fortran'
      end if
    end do
    call expect(bad == 0, 'every status constant matches the C library''s name for it')
    s = acx_status_str(ACX_ERR_STALE_BUFFER)
    call expect(index(s, 'ACX_ERR_STALE_BUFFER: ') == 1 .and. len(s) > len('ACX_ERR_STALE_BUFFER: '), &
                'acx_status_str(ACX_ERR_STALE_BUFFER) = "'//s//'"')
    call expect(index(acx_status_str(ACX_OK), 'ACX_OK') == 1, 'acx_status_str(ACX_OK) = "'//acx_status_str(ACX_OK)//'"')
    call expect(index(acx_status_str(12345_c_int), 'ACX_ERR_<unknown>') == 1, &
                'an unknown code: "'//acx_status_str(12345_c_int)//'"')
    call expect(acx_status_group(ACX_ERR_COLL_TIMEOUT) == 6 .and. acx_status_group(ACX_OK) == 0, 'acx_status_group')
    call expect(acx_is_retryable(ACX_ERR_DEVICE_LOST) .and. acx_is_retryable(ACX_ERR_TIMEOUT) .and. &
                .not. acx_is_retryable(ACX_ERR_BAD_TOKEN), 'acx_is_retryable')
    call expect(acx_is_device_lost(ACX_ERR_DEVICE_FATAL) .and. .not. acx_is_device_lost(ACX_ERR_DEVICE), &
                'acx_is_device_lost')
    v = acx_version(code)
    call expect(len(v) >= 5 .and. scan(v, '.') > 1 .and. code > 0, 'acx_version() = "'//v//'"')
    call expect(acx_dtype_name(ACX_DTYPE_F64) == 'f64', 'acx_dtype_name(ACX_DTYPE_F64)')
    call expect(acx_dtype_name(ACX_DTYPE_BF16) == 'bf16', 'acx_dtype_name(ACX_DTYPE_BF16)')
  end subroutine test_status

  subroutine test_device()
    integer(c_int64_t) :: gen
    call acx_device_ping(dev, timeout_ms=10000, stat=st)
    call expect(st == ACX_OK, 'acx_device_ping: '//acx_status_name(st))
    call acx_device_generation(dev, gen, stat=st)
    call expect(st == ACX_OK .and. gen == 1, 'acx_device_generation is 1')
    call acx_device_synchronize(dev, stat=st)
    call expect(st == ACX_OK, 'acx_device_synchronize (every stream): '//acx_status_name(st))
  end subroutine test_device

  subroutine test_round_trips()
    integer, parameter :: n = 1000
    type(acx_buffer) :: b
    real(c_double) :: d(n), d2(n)
    real(c_float) :: f(n), f2(n)
    integer(c_int32_t) :: i4(n), i42(n)
    integer(c_int64_t) :: i8(n), i82(n), count, gen
    integer(c_int8_t) :: by(16), by2(16)
    integer(c_int) :: dtype
    integer :: i

    do i = 1, n
      d(i) = 1.0_c_double/i + i
      f(i) = real(i, c_float)*0.5_c_float - 3
      i4(i) = int(i, c_int32_t)*7 - 5000
      i8(i) = int(i, c_int64_t)*123456789012_c_int64_t
    end do

    call acx_buffer_alloc(dev, b, n, ACX_DTYPE_F64, stat=st)
    call expect(st == ACX_OK .and. acx_associated(b), 'acx_buffer_alloc f64: '//acx_status_name(st))
    call acx_buffer_query(b, count=count, dtype=dtype, generation=gen, stat=st)
    call expect(st == ACX_OK .and. count == n .and. dtype == ACX_DTYPE_F64 .and. gen == 1, &
                'acx_buffer_query: count, dtype and generation')
    d2 = -1
    call acx_buffer_write(b, d, stat=st)
    call acx_buffer_read(b, d2)
    call expect(st == ACX_OK .and. all(d2 == d), 'f64 array round trip')
    ! A section at an element offset: the rest of the buffer stays.
    call acx_buffer_write(b, d(1:10)*2, offset=500_c_int64_t)
    call acx_buffer_read(b, d2(1:20), offset=495_c_int64_t)
    call expect(all(d2(1:5) == d(496:500)) .and. all(d2(6:15) == d(1:10)*2) .and. all(d2(16:20) == d(511:515)), &
                'f64 write and read at element offsets')
    call acx_buffer_free(b, stat=st)
    call expect(st == ACX_OK .and. .not. acx_associated(b), 'acx_buffer_free clears the handle')

    call acx_buffer_alloc(dev, b, int(n, c_int64_t), ACX_DTYPE_F32)
    f2 = 0
    call acx_buffer_write(b, f)
    call acx_buffer_read(b, f2)
    call expect(all(f2 == f), 'f32 array round trip (64-bit count)')
    call acx_buffer_free(b)

    call acx_buffer_alloc(dev, b, n, ACX_DTYPE_I32)
    i42 = 0
    call acx_buffer_write(b, i4)
    call acx_buffer_read(b, i42)
    call expect(all(i42 == i4), 'i32 array round trip')
    call acx_buffer_free(b)

    call acx_buffer_alloc(dev, b, n, ACX_DTYPE_I64, managed=.false.)
    i82 = 0
    call acx_buffer_write(b, i8)
    call acx_buffer_read(b, i82)
    call expect(all(i82 == i8), 'i64 array round trip')
    call acx_buffer_free(b)

    ! An untyped buffer takes any array: its bytes are the array's, little-endian.
    call acx_buffer_alloc(dev, b, 16, ACX_DTYPE_BYTE)
    call acx_buffer_write(b, [int(z'04030201', c_int32_t), 0_c_int32_t, -1_c_int32_t, 255_c_int32_t])
    by = 0
    call acx_buffer_read(b, by)
    call expect(all(by(1:4) == [1_c_int8_t, 2_c_int8_t, 3_c_int8_t, 4_c_int8_t]) .and. all(by(5:8) == 0) .and. &
                all(by(9:12) == -1_c_int8_t) .and. by(13) == -1_c_int8_t .and. all(by(14:16) == 0), &
                'i32 array into an untyped buffer, read back as bytes')
    by2 = [(int(i, c_int8_t), i=1, 16)]
    call acx_buffer_write(b, by2)
    by = 0
    call acx_buffer_read(b, by)
    call expect(all(by == by2), 'i8 array round trip')
    call acx_buffer_free(b)
  end subroutine test_round_trips

  subroutine test_fill_copy()
    integer, parameter :: n = 64
    type(acx_buffer) :: a, b
    real(c_double) :: d(n)
    real(c_float) :: f(n)
    integer(c_int32_t) :: i4(n)
    integer(c_int64_t) :: i8(n)

    call acx_buffer_alloc(dev, a, n, ACX_DTYPE_F64)
    call acx_buffer_alloc(dev, b, n, ACX_DTYPE_F64)
    call acx_buffer_fill(a, 2.5_c_double, stat=st)
    call acx_buffer_fill(a, -1.0_c_double, offset=10_c_int64_t, count=5_c_int64_t)
    d = 0
    call acx_buffer_read(a, d)
    call expect(st == ACX_OK .and. all(d(1:10) == 2.5_c_double) .and. all(d(11:15) == -1) .and. &
                all(d(16:) == 2.5_c_double), 'f64 fill, whole and a range')
    call acx_buffer_fill(b, 0.0_c_double)
    call acx_buffer_copy(b, a, dst_offset=32_c_int64_t, src_offset=8_c_int64_t, count=10_c_int64_t, stat=st)
    call acx_buffer_read(b, d)
    call expect(st == ACX_OK .and. all(d(1:32) == 0) .and. all(d(33:34) == 2.5_c_double) .and. &
                all(d(35:39) == -1) .and. all(d(40:42) == 2.5_c_double) .and. all(d(43:) == 0), &
                'acx_buffer_copy of a range between buffers')
    call acx_buffer_copy(b, a)
    call acx_buffer_read(b, d)
    call expect(all(d(11:15) == -1) .and. d(1) == 2.5_c_double .and. d(n) == 2.5_c_double, &
                'acx_buffer_copy of a whole buffer')
    call acx_buffer_free(a)
    call acx_buffer_free(b)

    call acx_buffer_alloc(dev, a, n, ACX_DTYPE_F32)
    call acx_buffer_fill(a, -0.75_c_float)
    call acx_buffer_read(a, f)
    call expect(all(f == -0.75_c_float), 'f32 fill (a negative value: sign bit in the pattern)')
    call acx_buffer_free(a)
    call acx_buffer_alloc(dev, a, n, ACX_DTYPE_I32)
    call acx_buffer_fill(a, -7_c_int32_t)
    call acx_buffer_read(a, i4)
    call expect(all(i4 == -7), 'i32 fill of a negative value')
    call acx_buffer_free(a)
    call acx_buffer_alloc(dev, a, n, ACX_DTYPE_I64)
    call acx_buffer_fill(a, -123456789012345_c_int64_t)
    call acx_buffer_read(a, i8)
    call expect(all(i8 == -123456789012345_c_int64_t), 'i64 fill')
    call acx_buffer_free(a)
  end subroutine test_fill_copy

  subroutine test_bad_input()
    type(acx_buffer) :: b, none
    real(c_float) :: f(4)
    real(c_double) :: d(8)
    f = 0
    d = 0
    call acx_buffer_alloc(dev, b, 0, ACX_DTYPE_F64, stat=st)
    call expect(st == ACX_ERR_INVALID_ARG .and. .not. acx_associated(b), 'alloc of 0 elements: '//acx_status_name(st))
    call acx_buffer_alloc(dev, b, 4, 99_c_int, stat=st)
    call expect(st == ACX_ERR_BAD_DTYPE, 'alloc of dtype 99: '//acx_status_name(st))
    call acx_buffer_alloc(dev, b, 4, ACX_DTYPE_F64)
    call acx_buffer_write(b, f, stat=st)
    call expect(st == ACX_ERR_BAD_DTYPE, 'f32 array into an f64 buffer: '//acx_status_name(st))
    call acx_buffer_read(b, d, stat=st)
    call expect(st == ACX_ERR_OUT_OF_RANGE, 'read of 8 elements from 4: '//acx_status_name(st))
    call acx_buffer_write(b, d(1:2), offset=3_c_int64_t, stat=st)
    call expect(st == ACX_ERR_OUT_OF_RANGE, 'write across the end: '//acx_status_name(st))
    call acx_buffer_write(b, d(1:2), offset=-1_c_int64_t, stat=st)
    call expect(st == ACX_ERR_INVALID_ARG, 'negative offset: '//acx_status_name(st))
    call acx_buffer_fill(b, 1.0_c_float, stat=st)
    call expect(st == ACX_ERR_BAD_DTYPE, 'f32 fill of an f64 buffer: '//acx_status_name(st))
    call acx_buffer_write(b, d(1:0), stat=st)
    call expect(st == ACX_OK, 'an empty array writes nothing: '//acx_status_name(st))
    call acx_buffer_free(b)
    call acx_buffer_free(none, stat=st)
    call expect(st == ACX_ERR_NULL_ARG, 'free of a never-allocated handle: '//acx_status_name(st))
    call acx_buffer_write(none, d, stat=st)
    call expect(st == ACX_ERR_NULL_ARG, 'write to a never-allocated handle: '//acx_status_name(st))
  end subroutine test_bad_input

  subroutine test_tokens()
    type(acx_buffer) :: b
    integer(c_int8_t) :: tok(ACX_TOKEN_BYTES), tok2(ACX_TOKEN_BYTES), ro(ACX_TOKEN_BYTES)
    type(acx_token_info) :: info, info2
    call acx_buffer_alloc(dev, b, 32, ACX_DTYPE_F32)
    call acx_buffer_export(b, tok, stat=st)
    call expect(st == ACX_OK .and. any(tok /= 0), 'acx_buffer_export: '//acx_status_name(st))
    call acx_token_decode(tok, info, stat=st)
    call expect(st == ACX_OK, 'acx_token_decode of an exported token: '//acx_status_name(st))
    call expect(info%version == 1 .and. info%owner_rank == 0 .and. info%node == 0 .and. &
                info%bytes == 128 .and. info%dtype == ACX_DTYPE_F32 .and. info%rights == ACX_TOKEN_RIGHTS_ALL .and. &
                info%generation == 1 .and. info%buffer_id /= 0 .and. info%key /= 0 .and. &
                info%devid_type == ACX_TOKEN_DEVID_NONE, 'decoded fields: version, owner, size, dtype, rights, ids')
    call acx_token_encode(info, tok2, stat=st)
    call expect(st == ACX_OK .and. all(tok2 == tok), 'decode then encode gives the same 100 bytes')
    call acx_buffer_export(b, ro, rights=ACX_TOKEN_READ)
    call acx_token_decode(ro, info2)
    call expect(info2%rights == ACX_TOKEN_READ .and. info2%key /= info%key .and. &
                info2%buffer_id == info%buffer_id, 'a second, read-only export has its own key')
    tok2 = tok
    tok2(60) = not(tok2(60))
    call acx_token_decode(tok2, info2, stat=st)
    call expect(st == ACX_ERR_BAD_TOKEN, 'a flipped byte: '//acx_status_name(st))
    call acx_token_decode(tok(1:99), info2, stat=st)
    call expect(st == ACX_ERR_BAD_TOKEN, 'a truncated record (99 bytes): '//acx_status_name(st))
    call acx_token_decode(tok(1:0), info2, stat=st)
    call expect(st == ACX_ERR_BAD_TOKEN, 'an empty record: '//acx_status_name(st))
    info2 = info
    info2%rights = 0
    call acx_token_encode(info2, tok2, stat=st)
    call expect(st == ACX_ERR_BAD_TOKEN, 'encode refuses a token without rights: '//acx_status_name(st))
    call acx_buffer_export(b, tok2, rights=0_c_int, stat=st)
    call expect(st == ACX_ERR_INVALID_ARG, 'export with no rights: '//acx_status_name(st))
    call acx_buffer_unexport(b, stat=st)
    call expect(st == ACX_OK, 'acx_buffer_unexport: '//acx_status_name(st))
    call acx_buffer_unexport(b, stat=st)
    call expect(st == ACX_ERR_NOT_FOUND, 'a second unexport: '//acx_status_name(st))
    call acx_buffer_free(b)
  end subroutine test_tokens

end program test_fortran_bindings
