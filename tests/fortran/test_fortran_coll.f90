! MPI test of the Fortran module acx (mpirun -np 2 or more): world init from an mpi_f08
! communicator and from the integer handle (a second world while one lives is refused), the
! world's numbers and binding, all-reduce of every Fortran element type and op (exact results),
! partial and out-of-place all-reduce, broadcast, an untyped buffer refused, and a token exported
! on rank 0, sent with MPI, decoded elsewhere.
program test_fortran_coll
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: output_unit
  use mpi_f08
  use acx
  implicit none

  integer, parameter :: n = 1000
  integer :: failures = 0, checks = 0
  integer :: provided, rank, nranks, mrank, msize, local_rank, local_size, node, nodes, i, all_failed
  integer(c_int) :: st
  type(acx_world) :: world, world2
  type(acx_system) :: sys
  type(acx_device) :: dev
  type(acx_coll) :: coll
  character(len=:), allocatable :: where

  call MPI_Init_thread(MPI_THREAD_MULTIPLE, provided)
  call MPI_Comm_rank(MPI_COMM_WORLD, mrank)
  call MPI_Comm_size(MPI_COMM_WORLD, msize)

  call acx_world_init(MPI_COMM_WORLD, world, stat=st)
  call expect(st == ACX_OK, 'acx_world_init(type(MPI_Comm)): '//acx_status_name(st))
  if (st /= ACX_OK) call MPI_Abort(MPI_COMM_WORLD, 2)
  call acx_world_query(world, rank=rank, size=nranks, local_rank=local_rank, local_size=local_size, &
                       node=node, nodes=nodes, stat=st)
  call expect(st == ACX_OK .and. rank == mrank .and. nranks == msize, 'acx_world_query: rank and size as MPI''s')
  call expect(local_rank >= 0 .and. local_rank < local_size .and. node >= 0 .and. node < nodes, &
              'acx_world_query: local rank and node in range')
  where = acx_world_binding_str(world, stat=st)
  call expect(st == ACX_OK .and. index(where, 'local rank') == 1, 'binding: "'//where//'"')
  ! One world per rank: a second one is refused while the first lives.
  call acx_world_init(MPI_COMM_WORLD%MPI_VAL, world2, stat=st)
  call expect(st == ACX_ERR_INVALID_STATE .and. .not. acx_associated(world2), &
              'a second acx_world_init refused: '//acx_status_name(st))
  call acx_world_finalize(world, stat=st)
  call expect(st == ACX_OK .and. .not. acx_associated(world), 'acx_world_finalize')
  ! The integer handle of `use mpi` names the same communicator; bind the main thread this time.
  call acx_world_init(MPI_COMM_WORLD%MPI_VAL, world, bind=.true., stat=st)
  call expect(st == ACX_OK, 'acx_world_init(integer handle): '//acx_status_name(st))
  if (st /= ACX_OK) call MPI_Abort(MPI_COMM_WORLD, 2)

  call acx_system_create(sys)
  call acx_device_open(sys, dev, kind=ACX_DEVICE_KIND_HOST, world=world)
  call acx_coll_create(world, dev, sys, coll, timeout_ms=60000, stat=st)
  call expect(st == ACX_OK, 'acx_coll_create: '//acx_status_name(st))
  if (st /= ACX_OK) call MPI_Abort(MPI_COMM_WORLD, 2)

  call test_allreduce()
  call test_broadcast_token()

  call acx_coll_destroy(coll, stat=st)
  call expect(st == ACX_OK, 'acx_coll_destroy: '//acx_status_name(st))
  call acx_device_close(dev)
  call acx_system_destroy(sys)
  call acx_world_finalize(world)
  all_failed = failures
  call MPI_Allreduce(MPI_IN_PLACE, all_failed, 1, MPI_INTEGER, MPI_SUM, MPI_COMM_WORLD)
  if (rank == 0) write (output_unit, '(a,i0,a,i0,a)') 'test_fortran_coll: ', checks - failures, ' of ', checks, &
    ' checks passed on rank 0'
  call MPI_Finalize()
  if (all_failed > 0) error stop 1

contains

  subroutine expect(cond, what)
    logical, intent(in) :: cond
    character(len=*), intent(in) :: what
    checks = checks + 1
    if (cond) then
      if (mrank == 0) write (output_unit, '(a)') '  ok    '//what
    else
      failures = failures + 1
      write (output_unit, '(a,i0,a)') '  FAIL  [rank ', mrank, '] '//what
    end if
  end subroutine expect

  subroutine test_allreduce()
    type(acx_buffer) :: a, b
    real(c_double) :: d(n), e(n)
    real(c_float) :: f(n)
    integer(c_int32_t) :: i4(n)
    integer(c_int64_t) :: i8(n), prod
    integer :: r
    ! Values whose sums and products are exact in every type.
    do i = 1, n
      d(i) = real(i + rank, c_double)
    end do
    call acx_buffer_alloc(dev, a, n, ACX_DTYPE_F64)
    call acx_buffer_write(a, d)
    call acx_allreduce(coll, a, a, ACX_REDOP_SUM, stat=st)
    call acx_buffer_read(a, e)
    call expect(st == ACX_OK .and. all(e == [(real(nranks*i + nranks*(nranks - 1)/2, c_double), i=1, n)]), &
                'f64 sum in place')
    call acx_buffer_write(a, d)
    call acx_allreduce(coll, a, a, ACX_REDOP_AVG)
    call acx_buffer_read(a, e)
    call expect(all(abs(e - [(real(i, c_double) + (nranks - 1)/2.0_c_double, i=1, n)]) < 1e-12_c_double), &
                'f64 avg in place')
    ! Out of place, the first 10 elements only: the rest of recv keeps its fill.
    call acx_buffer_write(a, d)
    call acx_buffer_alloc(dev, b, n, ACX_DTYPE_F64)
    call acx_buffer_fill(b, -1.0_c_double)
    call acx_allreduce(coll, a, b, ACX_REDOP_MAX, count=10_c_int64_t, stat=st)
    call acx_buffer_read(b, e)
    call expect(st == ACX_OK .and. all(e(1:10) == [(real(i + nranks - 1, c_double), i=1, 10)]) .and. &
                all(e(11:) == -1), 'f64 max of 10 elements out of place')
    call acx_buffer_free(a)
    call acx_buffer_free(b)

    f = [(real(i - rank, c_float), i=1, n)]
    call acx_buffer_alloc(dev, a, n, ACX_DTYPE_F32)
    call acx_buffer_write(a, f)
    call acx_allreduce(coll, a, a, ACX_REDOP_MIN)
    call acx_buffer_read(a, f)
    call expect(all(f == [(real(i - (nranks - 1), c_float), i=1, n)]), 'f32 min')
    call acx_buffer_free(a)

    i4 = [(int(i*(rank + 1), c_int32_t), i=1, n)]
    call acx_buffer_alloc(dev, a, n, ACX_DTYPE_I32)
    call acx_buffer_write(a, i4)
    call acx_allreduce(coll, a, a, ACX_REDOP_MAX)
    call acx_buffer_read(a, i4)
    call expect(all(i4 == [(int(i*nranks, c_int32_t), i=1, n)]), 'i32 max')
    call acx_buffer_free(a)

    i8 = int(rank + 2, c_int64_t)
    call acx_buffer_alloc(dev, a, n, ACX_DTYPE_I64)
    call acx_buffer_write(a, i8)
    call acx_allreduce(coll, a, a, ACX_REDOP_PROD)
    call acx_buffer_read(a, i8)
    prod = 1
    do r = 0, nranks - 1
      prod = prod*(r + 2)
    end do
    call expect(all(i8 == prod), 'i64 prod')
    call acx_buffer_free(a)

    call acx_buffer_alloc(dev, a, 16, ACX_DTYPE_BYTE)
    call acx_allreduce(coll, a, a, ACX_REDOP_SUM, stat=st)
    call expect(st == ACX_ERR_BAD_DTYPE, 'all-reduce of an untyped buffer: '//acx_status_name(st))
    call acx_buffer_free(a)
  end subroutine test_allreduce

  subroutine test_broadcast_token()
    type(acx_buffer) :: a
    integer(c_int32_t) :: v(8)
    integer(c_int8_t) :: tok(ACX_TOKEN_BYTES)
    type(acx_token_info) :: info
    integer :: root
    root = nranks - 1
    v = int(100*rank, c_int32_t) + [(int(i, c_int32_t), i=1, 8)]
    call acx_buffer_alloc(dev, a, 8, ACX_DTYPE_I32)
    call acx_buffer_write(a, v)
    call acx_broadcast(coll, a, root, stat=st)
    call acx_buffer_read(a, v)
    call expect(st == ACX_OK .and. all(v == int(100*root, c_int32_t) + [(int(i, c_int32_t), i=1, 8)]), &
                'i32 broadcast from the last rank')
    ! Rank 0 exports, every rank decodes what arrives over MPI. The epoch is 1: this is the
    ! process's second world, and epochs never go back (the first one's tokens stay stale).
    tok = 0
    if (rank == 0) call acx_buffer_export(a, tok, rights=ACX_TOKEN_READ)
    call MPI_Bcast(tok, ACX_TOKEN_BYTES, MPI_INTEGER1, 0, MPI_COMM_WORLD)
    call acx_token_decode(tok, info, stat=st)
    call expect(st == ACX_OK .and. info%owner_rank == 0 .and. info%bytes == 32 .and. &
                info%dtype == ACX_DTYPE_I32 .and. info%rights == ACX_TOKEN_READ .and. info%epoch == 1, &
                'a token exported on rank 0 decodes on every rank')
    if (rank == 0) call acx_buffer_unexport(a)
    call acx_buffer_free(a)
  end subroutine test_broadcast_token

end program test_fortran_coll
