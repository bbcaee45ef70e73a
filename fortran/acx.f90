! Fortran 2008 bindings of acx (module acx): status codes and strings, the actor system, the
! MPI world (from a Fortran communicator), devices, buffers filled from and read into Fortran
! arrays, fill and copies, all-reduce and broadcast, and buffer tokens as 100-byte records.
!
! Every C handle lives in a derived type with a private type(c_ptr): a handle is a reference,
! like an MPI handle; copying the variable copies the reference, and destroy/free/close ends it
! for every copy. Every procedure that can fail takes an optional `stat`: present, it receives
! the acx status (ACX_OK on success); absent, a failure prints acx_status_str and stops the
! program with error stop. Timeouts are optional, in milliseconds (absent or negative: acx's
! default deadline for the call, see docs/environment.md).
module acx
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: error_unit
#ifdef ACX_FORTRAN_MPI_F08
  use mpi_f08, only: MPI_Comm
#endif
  implicit none
  private

  ! ---- status codes (include/acx/status.h) ----
  integer(c_int), parameter, public :: ACX_OK = 0
  integer(c_int), parameter, public :: ACX_ERR_INVALID_ARG = 100, ACX_ERR_NULL_ARG = 101, &
    ACX_ERR_INVALID_STATE = 102, ACX_ERR_NOT_SUPPORTED = 103, ACX_ERR_BAD_DTYPE = 104, &
    ACX_ERR_OUT_OF_RANGE = 105, ACX_ERR_OVERFLOW = 106, ACX_ERR_BAD_PARAM = 107
  integer(c_int), parameter, public :: ACX_ERR_NO_MEMORY = 200, ACX_ERR_QUEUE_FULL = 201, &
    ACX_ERR_SYSTEM = 202, ACX_ERR_TIMEOUT = 203
  integer(c_int), parameter, public :: ACX_ERR_ACTOR_STOPPED = 300, ACX_ERR_NAME_TAKEN = 301, &
    ACX_ERR_NOT_FOUND = 302, ACX_ERR_ACTOR_FAILED = 303, ACX_ERR_CANCELLED = 304, &
    ACX_ERR_ESCALATED = 305, ACX_ERR_SYSTEM_STOPPING = 306
  integer(c_int), parameter, public :: ACX_ERR_DEVICE = 400, ACX_ERR_DEVICE_OOM = 401, &
    ACX_ERR_NO_DEVICE = 402, ACX_ERR_DEVICE_LOST = 450, ACX_ERR_DEVICE_FATAL = 451, &
    ACX_ERR_DEVICE_UNAVAILABLE = 452
  integer(c_int), parameter, public :: ACX_ERR_STALE_BUFFER = 500, ACX_ERR_UNKNOWN_BUFFER = 501, &
    ACX_ERR_BAD_TOKEN = 502, ACX_ERR_STALE_TOKEN = 503, ACX_ERR_DENIED = 504
  integer(c_int), parameter, public :: ACX_ERR_WORLD_REBUILDING = 600, ACX_ERR_PEER_LOST = 601, &
    ACX_ERR_COLL_TIMEOUT = 602, ACX_ERR_NCCL = 603, ACX_ERR_MPI = 604, ACX_ERR_BAD_LAUNCH = 605
  integer(c_int), parameter, public :: ACX_ERR_LIBRARY = 700, ACX_ERR_LIBRARY_INFO = 701, &
    ACX_ERR_COMPILE = 702

  ! ---- element types (acx_dtype_t) ----
  integer(c_int), parameter, public :: ACX_DTYPE_BYTE = 0, ACX_DTYPE_I8 = 1, ACX_DTYPE_U8 = 2, &
    ACX_DTYPE_I32 = 3, ACX_DTYPE_U32 = 4, ACX_DTYPE_I64 = 5, ACX_DTYPE_U64 = 6, ACX_DTYPE_F16 = 7, &
    ACX_DTYPE_BF16 = 8, ACX_DTYPE_F32 = 9, ACX_DTYPE_F64 = 10

  ! ---- devices ----
  integer(c_int), parameter, public :: ACX_DEVICE_KIND_DEFAULT = 0, ACX_DEVICE_KIND_HOST = 1, &
    ACX_DEVICE_KIND_CUDA = 2
  integer(c_int), parameter, public :: ACX_TRANSPORT_DEFAULT = 0, ACX_TRANSPORT_PROCESS = 1, &
    ACX_TRANSPORT_INLINE = 2
  ! As a stream of acx_device_synchronize: every stream.
  integer, parameter, public :: ACX_STREAM_ALL = -1

  ! acx_system_destroy's wait for the workers when the call gives none.
  integer, parameter, public :: ACX_SYSTEM_DESTROY_TIMEOUT_MS = 10000

  ! ---- collectives ----
  integer(c_int), parameter, public :: ACX_REDOP_SUM = 0, ACX_REDOP_PROD = 1, ACX_REDOP_MAX = 2, &
    ACX_REDOP_MIN = 3, ACX_REDOP_AVG = 4

  ! ---- tokens ----
  integer, parameter, public :: ACX_TOKEN_BYTES = 100
  integer(c_int), parameter, public :: ACX_TOKEN_READ = 1, ACX_TOKEN_WRITE = 2, ACX_TOKEN_RIGHTS_ALL = 3
  integer(c_int), parameter, public :: ACX_TOKEN_DEVID_NONE = 0, ACX_TOKEN_DEVID_PCI = 1, &
    ACX_TOKEN_DEVID_UUID = 2

  ! ---- handles ----
  type, public :: acx_system
    private
    type(c_ptr) :: ptr = c_null_ptr
  end type acx_system
  type, public :: acx_world
    private
    type(c_ptr) :: ptr = c_null_ptr
  end type acx_world
  type, public :: acx_device
    private
    type(c_ptr) :: ptr = c_null_ptr
  end type acx_device
  type, public :: acx_buffer
    private
    type(c_ptr) :: ptr = c_null_ptr
  end type acx_buffer
  type, public :: acx_coll
    private
    type(c_ptr) :: ptr = c_null_ptr
  end type acx_coll

  ! A decoded token (acx_token_t, include/acx/token.h). Unsigned 64-bit fields hold their bit
  ! pattern. device: the PCI bus id (NUL-terminated) or the 16-byte UUID, per devid_type.
  type, public, bind(c) :: acx_token_info
    integer(c_int32_t) :: version = 0
    integer(c_int32_t) :: owner_rank = 0
    integer(c_int32_t) :: node = 0
    integer(c_int32_t) :: devid_type = 0
    integer(c_int64_t) :: buffer_id = 0
    integer(c_int64_t) :: generation = 0
    integer(c_int64_t) :: epoch = 0
    integer(c_int64_t) :: bytes = 0
    integer(c_int64_t) :: key = 0
    integer(c_int32_t) :: dtype = 0
    integer(c_int32_t) :: rights = 0
    integer(c_int32_t) :: checksum = 0
    integer(c_int32_t) :: reserved = 0
    integer(c_int8_t) :: device(32) = 0_c_int8_t
  end type acx_token_info

  public :: acx_status_str, acx_status_name, acx_status_group, acx_is_retryable, acx_is_device_lost
  public :: acx_version, acx_dtype_name, acx_associated
  public :: acx_system_create, acx_system_destroy
  public :: acx_world_init, acx_world_finalize, acx_world_query, acx_world_binding_str
  public :: acx_device_open, acx_device_close, acx_device_synchronize, acx_device_ping, acx_device_generation
  public :: acx_buffer_alloc, acx_buffer_free, acx_buffer_query
  public :: acx_buffer_write, acx_buffer_read, acx_buffer_fill, acx_buffer_copy
  public :: acx_coll_create, acx_coll_destroy, acx_allreduce, acx_broadcast
  public :: acx_buffer_export, acx_buffer_unexport, acx_token_encode, acx_token_decode

  interface acx_associated
    module procedure system_associated, world_associated, device_associated, buffer_associated, &
      coll_associated
  end interface acx_associated

  ! From an mpi_f08 type(MPI_Comm), or the integer handle of `use mpi` / mpif.h.
  interface acx_world_init
    module procedure world_init_int
#ifdef ACX_FORTRAN_MPI_F08
    module procedure world_init_f08
#endif
  end interface acx_world_init

  interface acx_buffer_alloc
    module procedure buffer_alloc_i32, buffer_alloc_i64
  end interface acx_buffer_alloc

  interface acx_buffer_write
    module procedure write_f32, write_f64, write_i32, write_i64, write_i8
  end interface acx_buffer_write

  interface acx_buffer_read
    module procedure read_f32, read_f64, read_i32, read_i64, read_i8
  end interface acx_buffer_read

  interface acx_buffer_fill
    module procedure fill_f32, fill_f64, fill_i32, fill_i64, fill_i8
  end interface acx_buffer_fill

  ! ---- the C functions (libacx and fortran/acx_fortran_shim.c) ----
  interface
    function c_strlen(s) bind(c, name='strlen')
      import :: c_ptr, c_size_t
      type(c_ptr), value :: s
      integer(c_size_t) :: c_strlen
    end function c_strlen
    function c_status_str(s) bind(c, name='acx_status_str')
      import :: c_int, c_ptr
      integer(c_int), value :: s
      type(c_ptr) :: c_status_str
    end function c_status_str
    function c_status_name(s) bind(c, name='acx_status_name')
      import :: c_int, c_ptr
      integer(c_int), value :: s
      type(c_ptr) :: c_status_name
    end function c_status_name
    function c_dtype_name(d) bind(c, name='acx_dtype_name')
      import :: c_int, c_ptr
      integer(c_int), value :: d
      type(c_ptr) :: c_dtype_name
    end function c_dtype_name
    function c_version(code) bind(c, name='acx_version')
      import :: c_int, c_ptr
      integer(c_int), intent(out) :: code
      type(c_ptr) :: c_version
    end function c_version

    function c_system_create(threads, sys) bind(c, name='acx_system_create_f')
      import :: c_int, c_ptr
      integer(c_int), value :: threads
      type(c_ptr), intent(out) :: sys
      integer(c_int) :: c_system_create
    end function c_system_create
    function c_system_destroy(sys, timeout_ns) bind(c, name='acx_system_destroy')
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: sys
      integer(c_int64_t), value :: timeout_ns
      integer(c_int) :: c_system_destroy
    end function c_system_destroy

    function c_world_init(comm, device, bind_caller, world) bind(c, name='acx_world_init_f')
      import :: c_int, c_ptr
      integer(c_int), value :: comm
      integer(c_int), value :: device, bind_caller
      type(c_ptr), intent(out) :: world
      integer(c_int) :: c_world_init
    end function c_world_init
    function c_world_finalize(world) bind(c, name='acx_world_finalize')
      import :: c_int, c_ptr
      type(c_ptr), value :: world
      integer(c_int) :: c_world_finalize
    end function c_world_finalize
    function c_world_node(world, node, nodes) bind(c, name='acx_world_node')
      import :: c_int, c_ptr
      type(c_ptr), value :: world
      integer(c_int), intent(out) :: node, nodes
      integer(c_int) :: c_world_node
    end function c_world_node
    function c_world_binding_str(world, buf, len) bind(c, name='acx_world_binding_str_f')
      import :: c_int, c_ptr, c_char, c_size_t
      type(c_ptr), value :: world
      character(kind=c_char), intent(out) :: buf(*)
      integer(c_size_t), value :: len
      integer(c_int) :: c_world_binding_str
    end function c_world_binding_str

    function c_device_open(sys, kind, transport, streams, world, dev) bind(c, name='acx_device_open_f')
      import :: c_int, c_ptr
      type(c_ptr), value :: sys
      integer(c_int), value :: kind, transport, streams
      type(c_ptr), value :: world
      type(c_ptr), intent(out) :: dev
      integer(c_int) :: c_device_open
    end function c_device_open
    function c_device_close(dev, timeout_ns) bind(c, name='acx_device_close')
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: dev
      integer(c_int64_t), value :: timeout_ns
      integer(c_int) :: c_device_close
    end function c_device_close
    function c_device_synchronize(dev, stream, timeout_ns) bind(c, name='acx_device_synchronize')
      import :: c_int, c_ptr, c_int64_t, c_int32_t
      type(c_ptr), value :: dev
      integer(c_int32_t), value :: stream
      integer(c_int64_t), value :: timeout_ns
      integer(c_int) :: c_device_synchronize
    end function c_device_synchronize
    function c_device_ping(dev, timeout_ns) bind(c, name='acx_device_ping')
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: dev
      integer(c_int64_t), value :: timeout_ns
      integer(c_int) :: c_device_ping
    end function c_device_ping
    function c_device_generation(dev, gen) bind(c, name='acx_device_generation')
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: dev
      integer(c_int64_t), intent(out) :: gen
      integer(c_int) :: c_device_generation
    end function c_device_generation

    function c_buffer_alloc(dev, count, dtype, managed, timeout_ns, buf) bind(c, name='acx_buffer_alloc_f')
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: dev
      integer(c_int64_t), value :: count
      integer(c_int), value :: dtype, managed
      integer(c_int64_t), value :: timeout_ns
      type(c_ptr), intent(out) :: buf
      integer(c_int) :: c_buffer_alloc
    end function c_buffer_alloc
    function c_buffer_free(buf, timeout_ns) bind(c, name='acx_buffer_free_f')
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: buf
      integer(c_int64_t), value :: timeout_ns
      integer(c_int) :: c_buffer_free
    end function c_buffer_free
    function c_buffer_info(buf, count, dtype, generation) bind(c, name='acx_buffer_info_f')
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: buf
      integer(c_int64_t), intent(out) :: count
      integer(c_int), intent(out) :: dtype
      integer(c_int64_t), intent(out) :: generation
      integer(c_int) :: c_buffer_info
    end function c_buffer_info
    function c_buffer_write(buf, dtype, offset, src, count, stream, timeout_ns) bind(c, name='acx_buffer_write_f')
      import :: c_int, c_ptr, c_int64_t, c_int32_t
      type(c_ptr), value :: buf
      integer(c_int), value :: dtype
      integer(c_int64_t), value :: offset
      type(c_ptr), value :: src
      integer(c_int64_t), value :: count
      integer(c_int32_t), value :: stream
      integer(c_int64_t), value :: timeout_ns
      integer(c_int) :: c_buffer_write
    end function c_buffer_write
    function c_buffer_read(buf, dtype, offset, dst, count, stream, timeout_ns) bind(c, name='acx_buffer_read_f')
      import :: c_int, c_ptr, c_int64_t, c_int32_t
      type(c_ptr), value :: buf
      integer(c_int), value :: dtype
      integer(c_int64_t), value :: offset
      type(c_ptr), value :: dst
      integer(c_int64_t), value :: count
      integer(c_int32_t), value :: stream
      integer(c_int64_t), value :: timeout_ns
      integer(c_int) :: c_buffer_read
    end function c_buffer_read
    function c_buffer_fill(buf, dtype, offset, count, pattern, stream, timeout_ns) bind(c, name='acx_buffer_fill_f')
      import :: c_int, c_ptr, c_int64_t, c_int32_t
      type(c_ptr), value :: buf
      integer(c_int), value :: dtype
      integer(c_int64_t), value :: offset, count, pattern
      integer(c_int32_t), value :: stream
      integer(c_int64_t), value :: timeout_ns
      integer(c_int) :: c_buffer_fill
    end function c_buffer_fill
    function c_buffer_copy(dst, dst_offset, src, src_offset, count, stream, timeout_ns) &
        bind(c, name='acx_buffer_copy_f')
      import :: c_int, c_ptr, c_int64_t, c_int32_t
      type(c_ptr), value :: dst
      integer(c_int64_t), value :: dst_offset
      type(c_ptr), value :: src
      integer(c_int64_t), value :: src_offset, count
      integer(c_int32_t), value :: stream
      integer(c_int64_t), value :: timeout_ns
      integer(c_int) :: c_buffer_copy
    end function c_buffer_copy

    function c_coll_create(world, dev, sys, timeout_ns, coll) bind(c, name='acx_coll_create_f')
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: world, dev, sys
      integer(c_int64_t), value :: timeout_ns
      type(c_ptr), intent(out) :: coll
      integer(c_int) :: c_coll_create
    end function c_coll_create
    function c_coll_destroy(coll, timeout_ns) bind(c, name='acx_coll_destroy')
      import :: c_int, c_ptr, c_int64_t
      type(c_ptr), value :: coll
      integer(c_int64_t), value :: timeout_ns
      integer(c_int) :: c_coll_destroy
    end function c_coll_destroy
    function c_allreduce(coll, send, recv, count, op, stream, timeout_ns) bind(c, name='acx_allreduce_f')
      import :: c_int, c_ptr, c_int64_t, c_int32_t
      type(c_ptr), value :: coll, send, recv
      integer(c_int64_t), value :: count
      integer(c_int), value :: op
      integer(c_int32_t), value :: stream
      integer(c_int64_t), value :: timeout_ns
      integer(c_int) :: c_allreduce
    end function c_allreduce
    function c_broadcast(coll, buf, count, root, stream, timeout_ns) bind(c, name='acx_broadcast_f')
      import :: c_int, c_ptr, c_int64_t, c_int32_t
      type(c_ptr), value :: coll, buf
      integer(c_int64_t), value :: count
      integer(c_int), value :: root
      integer(c_int32_t), value :: stream
      integer(c_int64_t), value :: timeout_ns
      integer(c_int) :: c_broadcast
    end function c_broadcast

    function c_buffer_export(buf, rights, token) bind(c, name='acx_buffer_export_f')
      import :: c_int, c_ptr, c_int8_t
      type(c_ptr), value :: buf
      integer(c_int), value :: rights
      integer(c_int8_t), intent(out) :: token(*)
      integer(c_int) :: c_buffer_export
    end function c_buffer_export
    function c_buffer_unexport(buf) bind(c, name='acx_buffer_unexport')
      import :: c_int, c_ptr
      type(c_ptr), value :: buf
      integer(c_int) :: c_buffer_unexport
    end function c_buffer_unexport
    function c_token_encode(info, token) bind(c, name='acx_token_encode_f')
      import :: c_int, c_int8_t, acx_token_info
      type(acx_token_info), intent(in) :: info
      integer(c_int8_t), intent(out) :: token(*)
      integer(c_int) :: c_token_encode
    end function c_token_encode
    function c_token_decode(token, len, info) bind(c, name='acx_token_decode_f')
      import :: c_int, c_int8_t, c_int64_t, acx_token_info
      integer(c_int8_t), intent(in) :: token(*)
      integer(c_int64_t), value :: len
      type(acx_token_info), intent(out) :: info
      integer(c_int) :: c_token_decode
    end function c_token_decode
  end interface

  ! The world accessors share one C signature; the procedure pointer picks the function.
  abstract interface
    function world_int_fn(world, v) bind(c)
      import :: c_int, c_ptr
      type(c_ptr), value :: world
      integer(c_int), intent(out) :: v
      integer(c_int) :: world_int_fn
    end function world_int_fn
  end interface
  interface
    function c_world_rank(world, v) bind(c, name='acx_world_rank')
      import :: c_int, c_ptr
      type(c_ptr), value :: world
      integer(c_int), intent(out) :: v
      integer(c_int) :: c_world_rank
    end function c_world_rank
    function c_world_size(world, v) bind(c, name='acx_world_size')
      import :: c_int, c_ptr
      type(c_ptr), value :: world
      integer(c_int), intent(out) :: v
      integer(c_int) :: c_world_size
    end function c_world_size
    function c_world_local_rank(world, v) bind(c, name='acx_world_local_rank')
      import :: c_int, c_ptr
      type(c_ptr), value :: world
      integer(c_int), intent(out) :: v
      integer(c_int) :: c_world_local_rank
    end function c_world_local_rank
    function c_world_local_size(world, v) bind(c, name='acx_world_local_size')
      import :: c_int, c_ptr
      type(c_ptr), value :: world
      integer(c_int), intent(out) :: v
      integer(c_int) :: c_world_local_size
    end function c_world_local_size
  end interface

contains

  ! ---- helpers ----

  ! A NUL-terminated C string as a Fortran string of its length.
  function c_to_string(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer :: n, i
    if (.not. c_associated(p)) then
      s = ''
      return
    end if
    n = int(c_strlen(p))
    call c_f_pointer(p, chars, [n])
    allocate (character(len=n) :: s)
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function c_to_string

  ! Hands the status to the caller's stat, or stops the program on a failure when there is none:
  ! an unchecked acx failure must not pass silently.
  subroutine finish(st, what, stat)
    integer(c_int), intent(in) :: st
    character(len=*), intent(in) :: what
    integer(c_int), intent(out), optional :: stat
    if (present(stat)) then
      stat = st
    else if (st /= ACX_OK) then
      write (error_unit, '(a)') 'acx: '//what//' failed: '//acx_status_str(st)
      error stop 1
    end if
  end subroutine finish

  pure function to_ns(timeout_ms) result(ns)
    integer, intent(in), optional :: timeout_ms
    integer(c_int64_t) :: ns
    ns = -1_c_int64_t ! ACX_TIMEOUT_DEFAULT
    if (present(timeout_ms)) then
      if (timeout_ms >= 0) ns = int(timeout_ms, c_int64_t)*1000000_c_int64_t
    end if
  end function to_ns

  pure function opt_stream(stream) result(s)
    integer, intent(in), optional :: stream
    integer(c_int32_t) :: s
    s = 0_c_int32_t
    if (present(stream)) s = int(stream, c_int32_t)
  end function opt_stream

  pure function opt_i64(v, default) result(r)
    integer(c_int64_t), intent(in), optional :: v
    integer(c_int64_t), intent(in) :: default
    integer(c_int64_t) :: r
    r = default
    if (present(v)) r = v
  end function opt_i64

  ! ---- status, version, names ----

  ! "ACX_ERR_STALE_BUFFER: buffer from an earlier device generation".
  function acx_status_str(s) result(str)
    integer(c_int), intent(in) :: s
    character(len=:), allocatable :: str
    str = c_to_string(c_status_str(s))
  end function acx_status_str

  ! "ACX_ERR_STALE_BUFFER".
  function acx_status_name(s) result(str)
    integer(c_int), intent(in) :: s
    character(len=:), allocatable :: str
    str = c_to_string(c_status_name(s))
  end function acx_status_name

  ! 0 for ACX_OK, 1 argument, 2 resource, 3 actor, 4 device, 5 buffer/token, 6 world, 7 library.
  elemental integer function acx_status_group(s)
    integer(c_int), intent(in) :: s
    acx_status_group = s/100
  end function acx_status_group

  ! The same request may succeed once the runtime has recovered.
  elemental logical function acx_is_retryable(s)
    integer(c_int), intent(in) :: s
    acx_is_retryable = s == ACX_ERR_DEVICE_LOST .or. s == ACX_ERR_WORLD_REBUILDING .or. &
                       s == ACX_ERR_QUEUE_FULL .or. s == ACX_ERR_TIMEOUT
  end function acx_is_retryable

  ! The executor incarnation is gone (lost, fatal, unavailable).
  elemental logical function acx_is_device_lost(s)
    integer(c_int), intent(in) :: s
    acx_is_device_lost = s >= 450 .and. s < 500
  end function acx_is_device_lost

  ! "0.1.0"; code (optional) the numeric ACX_VERSION.
  function acx_version(code) result(str)
    integer, intent(out), optional :: code
    character(len=:), allocatable :: str
    integer(c_int) :: c
    str = c_to_string(c_version(c))
    if (present(code)) code = c
  end function acx_version

  function acx_dtype_name(dtype) result(str)
    integer(c_int), intent(in) :: dtype
    character(len=:), allocatable :: str
    str = c_to_string(c_dtype_name(dtype))
  end function acx_dtype_name

  logical function system_associated(h)
    type(acx_system), intent(in) :: h
    system_associated = c_associated(h%ptr)
  end function system_associated
  logical function world_associated(h)
    type(acx_world), intent(in) :: h
    world_associated = c_associated(h%ptr)
  end function world_associated
  logical function device_associated(h)
    type(acx_device), intent(in) :: h
    device_associated = c_associated(h%ptr)
  end function device_associated
  logical function buffer_associated(h)
    type(acx_buffer), intent(in) :: h
    buffer_associated = c_associated(h%ptr)
  end function buffer_associated
  logical function coll_associated(h)
    type(acx_coll), intent(in) :: h
    coll_associated = c_associated(h%ptr)
  end function coll_associated

  ! ---- actor system ----

  ! threads: worker threads (absent or <= 0: ACX_THREADS).
  subroutine acx_system_create(sys, threads, stat)
    type(acx_system), intent(out) :: sys
    integer, intent(in), optional :: threads
    integer(c_int), intent(out), optional :: stat
    integer(c_int) :: n
    n = 0
    if (present(threads)) n = threads
    call finish(c_system_create(n, sys%ptr), 'acx_system_create', stat)
  end subroutine acx_system_create

  ! Stops every actor and the workers, waiting for them up to timeout_ms (absent or negative:
  ! ACX_SYSTEM_DESTROY_TIMEOUT_MS; the C call has no default of its own). Destroy the colls and
  ! close the devices of the system first.
  subroutine acx_system_destroy(sys, timeout_ms, stat)
    type(acx_system), intent(inout) :: sys
    integer, intent(in), optional :: timeout_ms
    integer(c_int), intent(out), optional :: stat
    integer(c_int) :: st
    integer(c_int64_t) :: ns
    ns = to_ns(timeout_ms)
    if (ns < 0) ns = int(ACX_SYSTEM_DESTROY_TIMEOUT_MS, c_int64_t)*1000000_c_int64_t
    st = ACX_ERR_NULL_ARG
    if (c_associated(sys%ptr)) st = c_system_destroy(sys%ptr, ns)
    sys%ptr = c_null_ptr
    call finish(st, 'acx_system_destroy', stat)
  end subroutine acx_system_destroy

  ! ---- world ----

  ! Collective over comm. MPI must be initialised with MPI_THREAD_MULTIPLE. device: the CUDA
  ! ordinal for this rank (absent or < 0: ACX_DEVICE, else the topology's choice). bind: bind
  ! the calling thread to the cores chosen for the rank (absent: no); threads and processes it
  ! starts afterwards (acx's workers and executor included) inherit that binding.
  subroutine world_init_int(comm, world, device, bind, stat)
    integer, intent(in) :: comm
    type(acx_world), intent(out) :: world
    integer, intent(in), optional :: device
    logical, intent(in), optional :: bind
    integer(c_int), intent(out), optional :: stat
    integer(c_int) :: d, b
    d = -1
    b = 0
    if (present(device)) d = device
    if (present(bind)) then
      if (bind) b = 1
    end if
    call finish(c_world_init(int(comm, c_int), d, b, world%ptr), 'acx_world_init', stat)
  end subroutine world_init_int

#ifdef ACX_FORTRAN_MPI_F08
  subroutine world_init_f08(comm, world, device, bind, stat)
    type(MPI_Comm), intent(in) :: comm
    type(acx_world), intent(out) :: world
    integer, intent(in), optional :: device
    logical, intent(in), optional :: bind
    integer(c_int), intent(out), optional :: stat
    call world_init_int(comm%MPI_VAL, world, device, bind, stat)
  end subroutine world_init_f08
#endif

  ! Collective over the world's ranks, before MPI_Finalize.
  subroutine acx_world_finalize(world, stat)
    type(acx_world), intent(inout) :: world
    integer(c_int), intent(out), optional :: stat
    integer(c_int) :: st
    st = ACX_ERR_NULL_ARG
    if (c_associated(world%ptr)) st = c_world_finalize(world%ptr)
    world%ptr = c_null_ptr
    call finish(st, 'acx_world_finalize', stat)
  end subroutine acx_world_finalize

  ! Any of the world's numbers: rank and size, the node-local rank and size, node index and count.
  subroutine acx_world_query(world, rank, size, local_rank, local_size, node, nodes, stat)
    type(acx_world), intent(in) :: world
    integer, intent(out), optional :: rank, size, local_rank, local_size, node, nodes
    integer(c_int), intent(out), optional :: stat
    integer(c_int) :: st, v, nd, nn
    st = ACX_OK
    if (present(rank)) call get(c_world_rank, rank)
    if (present(size)) call get(c_world_size, size)
    if (present(local_rank)) call get(c_world_local_rank, local_rank)
    if (present(local_size)) call get(c_world_local_size, local_size)
    if (st == ACX_OK .and. (present(node) .or. present(nodes))) then
      st = c_world_node(world%ptr, nd, nn)
      if (present(node)) node = nd
      if (present(nodes)) nodes = nn
    end if
    call finish(st, 'acx_world_query', stat)
  contains
    subroutine get(fn, out)
      procedure(world_int_fn) :: fn
      integer, intent(out) :: out
      out = -1
      if (st /= ACX_OK) return
      st = fn(world%ptr, v)
      if (st == ACX_OK) out = v
    end subroutine get
  end subroutine acx_world_query

  ! "local rank 0: no GPU (host device kind) cpuset 0-1": the GPU and cores chosen for the rank.
  function acx_world_binding_str(world, stat) result(str)
    type(acx_world), intent(in) :: world
    integer(c_int), intent(out), optional :: stat
    character(len=:), allocatable :: str
    character(kind=c_char) :: buf(2048)
    integer(c_int) :: st
    integer :: n
    buf = c_null_char
    st = c_world_binding_str(world%ptr, buf, int(size(buf), c_size_t))
    n = 0
    if (st == ACX_OK) n = findloc(buf, c_null_char, dim=1) - 1
    allocate (character(len=max(n, 0)) :: str)
    if (n > 0) str = transfer(buf(1:n), str)
    call finish(st, 'acx_world_binding_str', stat)
  end function acx_world_binding_str

  ! ---- devices ----

  ! Opens this rank's device in sys. kind: ACX_DEVICE_KIND_HOST, _CUDA or _DEFAULT (absent:
  ! ACX_DEVICE_KIND, auto); transport: ACX_TRANSPORT_PROCESS, _INLINE or _DEFAULT (absent:
  ! ACX_EXECUTOR); streams: executor streams (absent: ACX_DEVICE_STREAMS); world: with a GPU kind,
  ! open the GPU the world chose for this rank.
  subroutine acx_device_open(sys, dev, kind, transport, streams, world, stat)
    type(acx_system), intent(in) :: sys
    type(acx_device), intent(out) :: dev
    integer, intent(in), optional :: kind, transport, streams
    type(acx_world), intent(in), optional :: world
    integer(c_int), intent(out), optional :: stat
    integer(c_int) :: k, t, s
    type(c_ptr) :: w
    k = ACX_DEVICE_KIND_DEFAULT
    t = ACX_TRANSPORT_DEFAULT
    s = 0
    w = c_null_ptr
    if (present(kind)) k = kind
    if (present(transport)) t = transport
    if (present(streams)) s = streams
    if (present(world)) w = world%ptr
    call finish(c_device_open(sys%ptr, k, t, s, w, dev%ptr), 'acx_device_open', stat)
  end subroutine acx_device_open

  ! Shuts the executor down. Free the device's buffers first (or after: they then only release).
  subroutine acx_device_close(dev, timeout_ms, stat)
    type(acx_device), intent(inout) :: dev
    integer, intent(in), optional :: timeout_ms
    integer(c_int), intent(out), optional :: stat
    integer(c_int) :: st
    st = ACX_ERR_NULL_ARG
    if (c_associated(dev%ptr)) st = c_device_close(dev%ptr, to_ns(timeout_ms))
    dev%ptr = c_null_ptr
    call finish(st, 'acx_device_close', stat)
  end subroutine acx_device_close

  ! Waits for the work queued on `stream` (absent or ACX_STREAM_ALL: every stream).
  subroutine acx_device_synchronize(dev, stream, timeout_ms, stat)
    type(acx_device), intent(in) :: dev
    integer, intent(in), optional :: stream, timeout_ms
    integer(c_int), intent(out), optional :: stat
    integer(c_int32_t) :: s
    s = -1_c_int32_t ! ACX_STREAM_ALL, 0xffffffff
    if (present(stream)) s = int(stream, c_int32_t)
    call finish(c_device_synchronize(dev%ptr, s, to_ns(timeout_ms)), 'acx_device_synchronize', stat)
  end subroutine acx_device_synchronize

  ! One empty round trip through the executor.
  subroutine acx_device_ping(dev, timeout_ms, stat)
    type(acx_device), intent(in) :: dev
    integer, intent(in), optional :: timeout_ms
    integer(c_int), intent(out), optional :: stat
    call finish(c_device_ping(dev%ptr, to_ns(timeout_ms)), 'acx_device_ping', stat)
  end subroutine acx_device_ping

  ! 1 for the first executor, + 1 for every restart.
  subroutine acx_device_generation(dev, generation, stat)
    type(acx_device), intent(in) :: dev
    integer(c_int64_t), intent(out) :: generation
    integer(c_int), intent(out), optional :: stat
    generation = 0
    call finish(c_device_generation(dev%ptr, generation), 'acx_device_generation', stat)
  end subroutine acx_device_generation

  ! ---- buffers ----

  ! count elements of dtype (ACX_DTYPE_*) of device memory; managed: unified memory instead.
  subroutine buffer_alloc_i64(dev, buf, count, dtype, managed, timeout_ms, stat)
    type(acx_device), intent(in) :: dev
    type(acx_buffer), intent(out) :: buf
    integer(c_int64_t), intent(in) :: count
    integer(c_int), intent(in) :: dtype
    logical, intent(in), optional :: managed
    integer, intent(in), optional :: timeout_ms
    integer(c_int), intent(out), optional :: stat
    integer(c_int) :: m
    m = 0
    if (present(managed)) then
      if (managed) m = 1
    end if
    call finish(c_buffer_alloc(dev%ptr, count, dtype, m, to_ns(timeout_ms), buf%ptr), 'acx_buffer_alloc', stat)
  end subroutine buffer_alloc_i64

  subroutine buffer_alloc_i32(dev, buf, count, dtype, managed, timeout_ms, stat)
    type(acx_device), intent(in) :: dev
    type(acx_buffer), intent(out) :: buf
    integer(c_int32_t), intent(in) :: count
    integer(c_int), intent(in) :: dtype
    logical, intent(in), optional :: managed
    integer, intent(in), optional :: timeout_ms
    integer(c_int), intent(out), optional :: stat
    call buffer_alloc_i64(dev, buf, int(count, c_int64_t), dtype, managed, timeout_ms, stat)
  end subroutine buffer_alloc_i32

  ! Frees the device memory and the handle (every copy of it).
  subroutine acx_buffer_free(buf, timeout_ms, stat)
    type(acx_buffer), intent(inout) :: buf
    integer, intent(in), optional :: timeout_ms
    integer(c_int), intent(out), optional :: stat
    integer(c_int) :: st
    st = ACX_ERR_NULL_ARG
    if (c_associated(buf%ptr)) st = c_buffer_free(buf%ptr, to_ns(timeout_ms))
    buf%ptr = c_null_ptr
    call finish(st, 'acx_buffer_free', stat)
  end subroutine acx_buffer_free

  ! Element count, dtype and the device generation the buffer belongs to.
  subroutine acx_buffer_query(buf, count, dtype, generation, stat)
    type(acx_buffer), intent(in) :: buf
    integer(c_int64_t), intent(out), optional :: count, generation
    integer(c_int), intent(out), optional :: dtype
    integer(c_int), intent(out), optional :: stat
    integer(c_int64_t) :: n, g
    integer(c_int) :: d
    n = 0
    g = 0
    d = -1
    call finish(c_buffer_info(buf%ptr, n, d, g), 'acx_buffer_query', stat)
    if (present(count)) count = n
    if (present(dtype)) dtype = d
    if (present(generation)) generation = g
  end subroutine acx_buffer_query

  ! Writes and reads: the whole array, at element `offset` (0-based, absent: 0) of the buffer.
  ! A typed buffer takes only arrays of its type (ACX_ERR_BAD_DTYPE), an untyped one any.
  ! Synchronous: the array may be reused when the call returns.
  subroutine write_any(buf, dtype, p, n, offset, stream, timeout_ms, stat)
    type(acx_buffer), intent(in) :: buf
    integer(c_int), intent(in) :: dtype
    type(c_ptr), intent(in) :: p
    integer(c_int64_t), intent(in) :: n
    integer(c_int64_t), intent(in), optional :: offset
    integer, intent(in), optional :: stream, timeout_ms
    integer(c_int), intent(out), optional :: stat
    call finish(c_buffer_write(buf%ptr, dtype, opt_i64(offset, 0_c_int64_t), p, n, opt_stream(stream), &
                               to_ns(timeout_ms)), 'acx_buffer_write', stat)
  end subroutine write_any

  subroutine read_any(buf, dtype, p, n, offset, stream, timeout_ms, stat)
    type(acx_buffer), intent(in) :: buf
    integer(c_int), intent(in) :: dtype
    type(c_ptr), intent(in) :: p
    integer(c_int64_t), intent(in) :: n
    integer(c_int64_t), intent(in), optional :: offset
    integer, intent(in), optional :: stream, timeout_ms
    integer(c_int), intent(out), optional :: stat
    call finish(c_buffer_read(buf%ptr, dtype, opt_i64(offset, 0_c_int64_t), p, n, opt_stream(stream), &
                              to_ns(timeout_ms)), 'acx_buffer_read', stat)
  end subroutine read_any

  subroutine write_f32(buf, src, offset, stream, timeout_ms, stat)
    type(acx_buffer), intent(in) :: buf
    real(c_float), intent(in), target, contiguous :: src(:)
    integer(c_int64_t), intent(in), optional :: offset
    integer, intent(in), optional :: stream, timeout_ms
    integer(c_int), intent(out), optional :: stat
    integer(c_int64_t) :: n
    type(c_ptr) :: p
    n = size(src, kind=c_int64_t)
    p = c_null_ptr
    if (n > 0) p = c_loc(src)
    call write_any(buf, ACX_DTYPE_F32, p, n, offset, stream, timeout_ms, stat)
  end subroutine write_f32

  subroutine write_f64(buf, src, offset, stream, timeout_ms, stat)
    type(acx_buffer), intent(in) :: buf
    real(c_double), intent(in), target, contiguous :: src(:)
    integer(c_int64_t), intent(in), optional :: offset
    integer, intent(in), optional :: stream, timeout_ms
    integer(c_int), intent(out), optional :: stat
    integer(c_int64_t) :: n
    type(c_ptr) :: p
    n = size(src, kind=c_int64_t)
    p = c_null_ptr
    if (n > 0) p = c_loc(src)
    call write_any(buf, ACX_DTYPE_F64, p, n, offset, stream, timeout_ms, stat)
  end subroutine write_f64

  subroutine write_i32(buf, src, offset, stream, timeout_ms, stat)
    type(acx_buffer), intent(in) :: buf
    integer(c_int32_t), intent(in), target, contiguous :: src(:)
    integer(c_int64_t), intent(in), optional :: offset
    integer, intent(in), optional :: stream, timeout_ms
    integer(c_int), intent(out), optional :: stat
    integer(c_int64_t) :: n
    type(c_ptr) :: p
    n = size(src, kind=c_int64_t)
    p = c_null_ptr
    if (n > 0) p = c_loc(src)
    call write_any(buf, ACX_DTYPE_I32, p, n, offset, stream, timeout_ms, stat)
  end subroutine write_i32

  subroutine write_i64(buf, src, offset, stream, timeout_ms, stat)
    type(acx_buffer), intent(in) :: buf
    integer(c_int64_t), intent(in), target, contiguous :: src(:)
    integer(c_int64_t), intent(in), optional :: offset
    integer, intent(in), optional :: stream, timeout_ms
    integer(c_int), intent(out), optional :: stat
    integer(c_int64_t) :: n
    type(c_ptr) :: p
    n = size(src, kind=c_int64_t)
    p = c_null_ptr
    if (n > 0) p = c_loc(src)
    call write_any(buf, ACX_DTYPE_I64, p, n, offset, stream, timeout_ms, stat)
  end subroutine write_i64

  subroutine write_i8(buf, src, offset, stream, timeout_ms, stat)
    type(acx_buffer), intent(in) :: buf
    integer(c_int8_t), intent(in), target, contiguous :: src(:)
    integer(c_int64_t), intent(in), optional :: offset
    integer, intent(in), optional :: stream, timeout_ms
    integer(c_int), intent(out), optional :: stat
    integer(c_int64_t) :: n
    type(c_ptr) :: p
    n = size(src, kind=c_int64_t)
    p = c_null_ptr
    if (n > 0) p = c_loc(src)
    call write_any(buf, ACX_DTYPE_I8, p, n, offset, stream, timeout_ms, stat)
  end subroutine write_i8

  subroutine read_f32(buf, dst, offset, stream, timeout_ms, stat)
    type(acx_buffer), intent(in) :: buf
    real(c_float), intent(inout), target, contiguous :: dst(:)
    integer(c_int64_t), intent(in), optional :: offset
    integer, intent(in), optional :: stream, timeout_ms
    integer(c_int), intent(out), optional :: stat
    integer(c_int64_t) :: n
    type(c_ptr) :: p
    n = size(dst, kind=c_int64_t)
    p = c_null_ptr
    if (n > 0) p = c_loc(dst)
    call read_any(buf, ACX_DTYPE_F32, p, n, offset, stream, timeout_ms, stat)
  end subroutine read_f32

  subroutine read_f64(buf, dst, offset, stream, timeout_ms, stat)
    type(acx_buffer), intent(in) :: buf
    real(c_double), intent(inout), target, contiguous :: dst(:)
    integer(c_int64_t), intent(in), optional :: offset
    integer, intent(in), optional :: stream, timeout_ms
    integer(c_int), intent(out), optional :: stat
    integer(c_int64_t) :: n
    type(c_ptr) :: p
    n = size(dst, kind=c_int64_t)
    p = c_null_ptr
    if (n > 0) p = c_loc(dst)
    call read_any(buf, ACX_DTYPE_F64, p, n, offset, stream, timeout_ms, stat)
  end subroutine read_f64

  subroutine read_i32(buf, dst, offset, stream, timeout_ms, stat)
    type(acx_buffer), intent(in) :: buf
    integer(c_int32_t), intent(inout), target, contiguous :: dst(:)
    integer(c_int64_t), intent(in), optional :: offset
    integer, intent(in), optional :: stream, timeout_ms
    integer(c_int), intent(out), optional :: stat
    integer(c_int64_t) :: n
    type(c_ptr) :: p
    n = size(dst, kind=c_int64_t)
    p = c_null_ptr
    if (n > 0) p = c_loc(dst)
    call read_any(buf, ACX_DTYPE_I32, p, n, offset, stream, timeout_ms, stat)
  end subroutine read_i32

  subroutine read_i64(buf, dst, offset, stream, timeout_ms, stat)
    type(acx_buffer), intent(in) :: buf
    integer(c_int64_t), intent(inout), target, contiguous :: dst(:)
    integer(c_int64_t), intent(in), optional :: offset
    integer, intent(in), optional :: stream, timeout_ms
    integer(c_int), intent(out), optional :: stat
    integer(c_int64_t) :: n
    type(c_ptr) :: p
    n = size(dst, kind=c_int64_t)
    p = c_null_ptr
    if (n > 0) p = c_loc(dst)
    call read_any(buf, ACX_DTYPE_I64, p, n, offset, stream, timeout_ms, stat)
  end subroutine read_i64

  subroutine read_i8(buf, dst, offset, stream, timeout_ms, stat)
    type(acx_buffer), intent(in) :: buf
    integer(c_int8_t), intent(inout), target, contiguous :: dst(:)
    integer(c_int64_t), intent(in), optional :: offset
    integer, intent(in), optional :: stream, timeout_ms
    integer(c_int), intent(out), optional :: stat
    integer(c_int64_t) :: n
    type(c_ptr) :: p
    n = size(dst, kind=c_int64_t)
    p = c_null_ptr
    if (n > 0) p = c_loc(dst)
    call read_any(buf, ACX_DTYPE_I8, p, n, offset, stream, timeout_ms, stat)
  end subroutine read_i8

  ! Fill: count elements (absent: to the end) from element `offset` := value. The value's type
  ! must be the buffer's (an untyped buffer takes any and repeats its bytes).
  subroutine fill_any(buf, dtype, pattern, offset, count, stream, timeout_ms, stat)
    type(acx_buffer), intent(in) :: buf
    integer(c_int), intent(in) :: dtype
    integer(c_int64_t), intent(in) :: pattern
    integer(c_int64_t), intent(in), optional :: offset, count
    integer, intent(in), optional :: stream, timeout_ms
    integer(c_int), intent(out), optional :: stat
    call finish(c_buffer_fill(buf%ptr, dtype, opt_i64(offset, 0_c_int64_t), opt_i64(count, -1_c_int64_t), &
                              pattern, opt_stream(stream), to_ns(timeout_ms)), 'acx_buffer_fill', stat)
  end subroutine fill_any

  ! The low 32 bits of a 64-bit pattern, without the sign extension int() would bring.
  pure function low32(v) result(r)
    integer(c_int32_t), intent(in) :: v
    integer(c_int64_t) :: r
    r = iand(int(v, c_int64_t), int(z'FFFFFFFF', c_int64_t))
  end function low32

  subroutine fill_f32(buf, value, offset, count, stream, timeout_ms, stat)
    type(acx_buffer), intent(in) :: buf
    real(c_float), intent(in) :: value
    integer(c_int64_t), intent(in), optional :: offset, count
    integer, intent(in), optional :: stream, timeout_ms
    integer(c_int), intent(out), optional :: stat
    call fill_any(buf, ACX_DTYPE_F32, low32(transfer(value, 0_c_int32_t)), offset, count, stream, timeout_ms, stat)
  end subroutine fill_f32

  subroutine fill_f64(buf, value, offset, count, stream, timeout_ms, stat)
    type(acx_buffer), intent(in) :: buf
    real(c_double), intent(in) :: value
    integer(c_int64_t), intent(in), optional :: offset, count
    integer, intent(in), optional :: stream, timeout_ms
    integer(c_int), intent(out), optional :: stat
    call fill_any(buf, ACX_DTYPE_F64, transfer(value, 0_c_int64_t), offset, count, stream, timeout_ms, stat)
  end subroutine fill_f64

  subroutine fill_i32(buf, value, offset, count, stream, timeout_ms, stat)
    type(acx_buffer), intent(in) :: buf
    integer(c_int32_t), intent(in) :: value
    integer(c_int64_t), intent(in), optional :: offset, count
    integer, intent(in), optional :: stream, timeout_ms
    integer(c_int), intent(out), optional :: stat
    call fill_any(buf, ACX_DTYPE_I32, low32(value), offset, count, stream, timeout_ms, stat)
  end subroutine fill_i32

  subroutine fill_i64(buf, value, offset, count, stream, timeout_ms, stat)
    type(acx_buffer), intent(in) :: buf
    integer(c_int64_t), intent(in) :: value
    integer(c_int64_t), intent(in), optional :: offset, count
    integer, intent(in), optional :: stream, timeout_ms
    integer(c_int), intent(out), optional :: stat
    call fill_any(buf, ACX_DTYPE_I64, value, offset, count, stream, timeout_ms, stat)
  end subroutine fill_i64

  subroutine fill_i8(buf, value, offset, count, stream, timeout_ms, stat)
    type(acx_buffer), intent(in) :: buf
    integer(c_int8_t), intent(in) :: value
    integer(c_int64_t), intent(in), optional :: offset, count
    integer, intent(in), optional :: stream, timeout_ms
    integer(c_int), intent(out), optional :: stat
    call fill_any(buf, ACX_DTYPE_I8, iand(int(value, c_int64_t), 255_c_int64_t), offset, count, stream, &
                  timeout_ms, stat)
  end subroutine fill_i8

  ! dst(dst_offset:) := src(src_offset:), count elements of src's type (absent: the rest of src).
  ! Both on one device; typed buffers must share the type.
  subroutine acx_buffer_copy(dst, src, dst_offset, src_offset, count, stream, timeout_ms, stat)
    type(acx_buffer), intent(in) :: dst, src
    integer(c_int64_t), intent(in), optional :: dst_offset, src_offset, count
    integer, intent(in), optional :: stream, timeout_ms
    integer(c_int), intent(out), optional :: stat
    call finish(c_buffer_copy(dst%ptr, opt_i64(dst_offset, 0_c_int64_t), src%ptr, opt_i64(src_offset, 0_c_int64_t), &
                              opt_i64(count, -1_c_int64_t), opt_stream(stream), to_ns(timeout_ms)), &
                'acx_buffer_copy', stat)
  end subroutine acx_buffer_copy

  ! ---- collectives ----

  ! Collective over the world's ranks, each with its device (of one kind) opened in sys.
  ! timeout_ms: the deadline of each operation (absent: ACX_COLL_TIMEOUT).
  subroutine acx_coll_create(world, dev, sys, coll, timeout_ms, stat)
    type(acx_world), intent(in) :: world
    type(acx_device), intent(in) :: dev
    type(acx_system), intent(in) :: sys
    type(acx_coll), intent(out) :: coll
    integer, intent(in), optional :: timeout_ms
    integer(c_int), intent(out), optional :: stat
    call finish(c_coll_create(world%ptr, dev%ptr, sys%ptr, to_ns(timeout_ms), coll%ptr), 'acx_coll_create', stat)
  end subroutine acx_coll_create

  subroutine acx_coll_destroy(coll, timeout_ms, stat)
    type(acx_coll), intent(inout) :: coll
    integer, intent(in), optional :: timeout_ms
    integer(c_int), intent(out), optional :: stat
    integer(c_int) :: st
    st = ACX_ERR_NULL_ARG
    if (c_associated(coll%ptr)) st = c_coll_destroy(coll%ptr, to_ns(timeout_ms))
    coll%ptr = c_null_ptr
    call finish(st, 'acx_coll_destroy', stat)
  end subroutine acx_coll_destroy

  ! recv(1:count) := op over ranks of send(1:count), in the buffers' dtype, and waits for it.
  ! send and recv may be the same buffer. count absent: all of send.
  subroutine acx_allreduce(coll, send, recv, op, count, stream, timeout_ms, stat)
    type(acx_coll), intent(in) :: coll
    type(acx_buffer), intent(in) :: send, recv
    integer(c_int), intent(in) :: op
    integer(c_int64_t), intent(in), optional :: count
    integer, intent(in), optional :: stream, timeout_ms
    integer(c_int), intent(out), optional :: stat
    call finish(c_allreduce(coll%ptr, send%ptr, recv%ptr, opt_i64(count, -1_c_int64_t), op, opt_stream(stream), &
                            to_ns(timeout_ms)), 'acx_allreduce', stat)
  end subroutine acx_allreduce

  ! buf(1:count) := root's buf(1:count) on every rank, and waits for it. count absent: all of buf.
  subroutine acx_broadcast(coll, buf, root, count, stream, timeout_ms, stat)
    type(acx_coll), intent(in) :: coll
    type(acx_buffer), intent(in) :: buf
    integer, intent(in) :: root
    integer(c_int64_t), intent(in), optional :: count
    integer, intent(in), optional :: stream, timeout_ms
    integer(c_int), intent(out), optional :: stat
    call finish(c_broadcast(coll%ptr, buf%ptr, opt_i64(count, -1_c_int64_t), int(root, c_int), opt_stream(stream), &
                            to_ns(timeout_ms)), 'acx_broadcast', stat)
  end subroutine acx_broadcast

  ! ---- tokens ----

  ! Exports buf with `rights` (ACX_TOKEN_READ and/or ACX_TOKEN_WRITE; absent: both) and gives
  ! its encoded token, ready for MPI (ACX_TOKEN_BYTES elements of MPI_BYTE / MPI_INTEGER1).
  subroutine acx_buffer_export(buf, token, rights, stat)
    type(acx_buffer), intent(in) :: buf
    integer(c_int8_t), intent(out) :: token(ACX_TOKEN_BYTES)
    integer(c_int), intent(in), optional :: rights
    integer(c_int), intent(out), optional :: stat
    integer(c_int) :: r
    token = 0_c_int8_t
    r = ACX_TOKEN_RIGHTS_ALL
    if (present(rights)) r = rights
    call finish(c_buffer_export(buf%ptr, r, token), 'acx_buffer_export', stat)
  end subroutine acx_buffer_export

  ! Revokes every export of buf: their tokens answer ACX_ERR_STALE_TOKEN from now on.
  subroutine acx_buffer_unexport(buf, stat)
    type(acx_buffer), intent(in) :: buf
    integer(c_int), intent(out), optional :: stat
    call finish(c_buffer_unexport(buf%ptr), 'acx_buffer_unexport', stat)
  end subroutine acx_buffer_unexport

  ! info -> the 100-byte record; the fields are checked as decode checks them.
  subroutine acx_token_encode(info, token, stat)
    type(acx_token_info), intent(in) :: info
    integer(c_int8_t), intent(out) :: token(ACX_TOKEN_BYTES)
    integer(c_int), intent(out), optional :: stat
    token = 0_c_int8_t
    call finish(c_token_encode(info, token), 'acx_token_encode', stat)
  end subroutine acx_token_encode

  ! The record -> info. ACX_ERR_BAD_TOKEN (the log line says why) for anything malformed,
  ! including a record of the wrong length.
  subroutine acx_token_decode(token, info, stat)
    integer(c_int8_t), intent(in) :: token(:)
    type(acx_token_info), intent(out) :: info
    integer(c_int), intent(out), optional :: stat
    integer(c_int8_t) :: none(1)
    none = 0_c_int8_t
    if (size(token) > 0) then
      call finish(c_token_decode(token, size(token, kind=c_int64_t), info), 'acx_token_decode', stat)
    else
      call finish(c_token_decode(none, 0_c_int64_t, info), 'acx_token_decode', stat)
    end if
  end subroutine acx_token_decode

end module acx
