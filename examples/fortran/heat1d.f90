! heat1d: the 1D heat equation u_t = u_xx on (0, 1), u = 0 at both ends, explicit in time, the
! grid split in blocks across MPI ranks. Halos go through MPI; the global residual of every step
! (the 2-norm of the update) is all-reduced through acx, on the host device kind by default or
! the rank's GPU with --cuda. --check gathers the field on rank 0 and compares field and
! residuals with a serial run of the same scheme (the test does this); exit 77 without a GPU.
!
!   mpirun -np 2 ./heat1d [--cuda] [--inline] [--check] [--n POINTS] [--steps S] [--print K]
program heat1d
  use, intrinsic :: iso_c_binding, only: c_double, c_int, c_int64_t
  use, intrinsic :: iso_fortran_env, only: error_unit, output_unit
  use mpi_f08
  use acx
  implicit none

  real(c_double), parameter :: pi = acos(-1.0_c_double)
  real(c_double), parameter :: r = 0.25_c_double ! dt / dx^2: stable below 0.5
  real(c_double), parameter :: tol = 1.0e-12_c_double

  integer :: n = 400, steps = 2000, print_every = 200
  integer :: kind = ACX_DEVICE_KIND_HOST, transport = ACX_TRANSPORT_PROCESS
  logical :: check = .false.

  type(acx_system) :: sys
  type(acx_world) :: world
  type(acx_device) :: dev
  type(acx_coll) :: coll
  type(acx_buffer) :: res_buf
  integer :: provided, rank, nranks, left, right, first, nloc, step, last, all_ok
  integer(c_int) :: st
  real(c_double), allocatable :: u(:), unew(:), history(:)
  real(c_double) :: local(1), global(1), residual

  call MPI_Init_thread(MPI_THREAD_MULTIPLE, provided)
  call parse_args()

  ! acx: the world (this rank's node, GPU and cores), an actor system, the device, collectives.
  call acx_world_init(MPI_COMM_WORLD, world)
  call acx_world_query(world, rank=rank, size=nranks)
  call acx_system_create(sys)
  call acx_device_open(sys, dev, kind=kind, transport=transport, world=world, stat=st)
  ! Every rank must agree before the collective create: skip together when a GPU is missing.
  all_ok = merge(1, 0, st == ACX_OK)
  call MPI_Allreduce(MPI_IN_PLACE, all_ok, 1, MPI_INTEGER, MPI_MIN, MPI_COMM_WORLD)
  if (all_ok == 0) then
    if (kind == ACX_DEVICE_KIND_CUDA .and. (st == ACX_OK .or. st == ACX_ERR_NO_DEVICE)) then
      if (st == ACX_OK) call acx_device_close(dev)
      call acx_system_destroy(sys)
      call acx_world_finalize(world)
      call MPI_Finalize()
      if (rank == 0) write (output_unit, '(a)') 'heat1d: no GPU on every rank: skipped'
      stop 77
    end if
    write (error_unit, '(a,i0,a)') 'heat1d: rank ', rank, ': acx_device_open: '//acx_status_str(st)
    call MPI_Abort(MPI_COMM_WORLD, 2)
  end if
  call acx_coll_create(world, dev, sys, coll)
  call acx_buffer_alloc(dev, res_buf, 1, ACX_DTYPE_F64)

  ! Block decomposition: the first mod(n, nranks) ranks hold one point more.
  nloc = n/nranks + merge(1, 0, rank < mod(n, nranks))
  first = rank*(n/nranks) + min(rank, mod(n, nranks)) + 1
  left = merge(MPI_PROC_NULL, rank - 1, rank == 0)
  right = merge(MPI_PROC_NULL, rank + 1, rank == nranks - 1)
  allocate (u(0:nloc + 1), unew(0:nloc + 1), history(steps))
  call initial(u, first, nloc, n)

  if (rank == 0) write (output_unit, '(a,i0,a,i0,a,a)') 'heat1d: ', n, ' points on ', nranks, &
    ' ranks, residual through acx on the ', trim(merge('cuda', 'host', kind == ACX_DEVICE_KIND_CUDA))//' device'
  last = steps
  do step = 1, steps
    call halo(u, nloc, left, right)
    call advance(u, unew, nloc, local(1))
    u(1:nloc) = unew(1:nloc)
    ! The global residual: the local sum of squares into the device buffer, all-reduced in
    ! place across ranks, read back.
    call acx_buffer_write(res_buf, local)
    call acx_allreduce(coll, res_buf, res_buf, ACX_REDOP_SUM)
    call acx_buffer_read(res_buf, global)
    residual = sqrt(global(1))
    history(step) = residual
    if (rank == 0 .and. (mod(step, print_every) == 0 .or. step == 1)) &
      write (output_unit, '(a,i6,a,es22.15)') 'step ', step, '  residual ', residual
    if (residual < tol) then
      last = step
      exit
    end if
  end do
  if (rank == 0) write (output_unit, '(a,i0,a,es22.15)') 'heat1d: ', last, ' steps, final residual ', &
    history(last)

  all_ok = 1
  if (check) all_ok = check_serial()

  call acx_buffer_free(res_buf)
  call acx_coll_destroy(coll)
  call acx_device_close(dev)
  call acx_system_destroy(sys)
  call acx_world_finalize(world)
  call MPI_Allreduce(MPI_IN_PLACE, all_ok, 1, MPI_INTEGER, MPI_MIN, MPI_COMM_WORLD)
  call MPI_Finalize()
  if (all_ok /= 1) error stop 1

contains

  subroutine parse_args()
    character(len=64) :: arg, val
    integer :: i, ios
    i = 1
    do while (i <= command_argument_count())
      call get_command_argument(i, arg)
      select case (trim(arg))
      case ('--cuda')
        kind = ACX_DEVICE_KIND_CUDA
      case ('--inline')
        transport = ACX_TRANSPORT_INLINE
      case ('--check')
        check = .true.
      case ('--n', '--steps', '--print')
        i = i + 1
        call get_command_argument(i, val)
        select case (trim(arg))
        case ('--n')
          read (val, *, iostat=ios) n
        case ('--steps')
          read (val, *, iostat=ios) steps
        case default
          read (val, *, iostat=ios) print_every
        end select
        if (ios /= 0 .or. n < 3 .or. steps < 1 .or. print_every < 1) call usage(arg)
      case default
        call usage(arg)
      end select
      i = i + 1
    end do
  end subroutine parse_args

  subroutine usage(arg)
    character(len=*), intent(in) :: arg
    write (error_unit, '(a)') 'heat1d: bad argument '''//trim(arg)//''''
    write (error_unit, '(a)') 'usage: heat1d [--cuda] [--inline] [--check] [--n POINTS>=3] [--steps S] [--print K]'
    call MPI_Abort(MPI_COMM_WORLD, 2)
  end subroutine usage

  ! u(i) at x = i / (n + 1) for the global points first..first+nloc-1.
  subroutine initial(v, first, nloc, n)
    real(c_double), intent(out) :: v(0:)
    integer, intent(in) :: first, nloc, n
    integer :: i
    real(c_double) :: x
    v = 0
    do i = 1, nloc
      x = real(first + i - 1, c_double)/real(n + 1, c_double)
      v(i) = sin(pi*x) + 0.5_c_double*sin(3*pi*x)
    end do
  end subroutine initial

  subroutine halo(v, nloc, left, right)
    real(c_double), intent(inout) :: v(0:)
    integer, intent(in) :: nloc, left, right
    ! Outside the domain the boundary value 0 stays (MPI_PROC_NULL leaves the halo untouched).
    call MPI_Sendrecv(v(1), 1, MPI_DOUBLE_PRECISION, left, 1, v(nloc + 1), 1, MPI_DOUBLE_PRECISION, right, 1, &
                      MPI_COMM_WORLD, MPI_STATUS_IGNORE)
    call MPI_Sendrecv(v(nloc), 1, MPI_DOUBLE_PRECISION, right, 2, v(0), 1, MPI_DOUBLE_PRECISION, left, 2, &
                      MPI_COMM_WORLD, MPI_STATUS_IGNORE)
  end subroutine halo

  ! One explicit step on points 1..nloc (halos in v(0) and v(nloc+1)); sumsq := sum of the
  ! squared updates. The serial check runs this very code, so the field matches bit for bit.
  subroutine advance(v, vnew, nloc, sumsq)
    real(c_double), intent(in) :: v(0:)
    real(c_double), intent(inout) :: vnew(0:)
    integer, intent(in) :: nloc
    real(c_double), intent(out) :: sumsq
    integer :: i
    sumsq = 0
    do i = 1, nloc
      vnew(i) = v(i) + r*((v(i - 1) - 2*v(i)) + v(i + 1))
      sumsq = sumsq + (vnew(i) - v(i))**2
    end do
  end subroutine advance

  ! Rank 0 runs the whole grid serially and compares: the field exactly, the residuals within a
  ! relative 1e-12 (the parallel sum adds the ranks' partial sums in another order).
  integer function check_serial() result(ok)
    real(c_double), allocatable :: field(:), s(:), snew(:)
    integer, allocatable :: counts(:), displs(:)
    integer :: k, sstep, slast, i
    real(c_double) :: sumsq, rel, worst
    ok = 1
    allocate (counts(nranks), displs(nranks), field(n))
    call MPI_Gather(nloc, 1, MPI_INTEGER, counts, 1, MPI_INTEGER, 0, MPI_COMM_WORLD)
    if (rank == 0) then
      displs(1) = 0
      do k = 2, nranks
        displs(k) = displs(k - 1) + counts(k - 1)
      end do
    end if
    call MPI_Gatherv(u(1:nloc), nloc, MPI_DOUBLE_PRECISION, field, counts, displs, MPI_DOUBLE_PRECISION, 0, &
                     MPI_COMM_WORLD)
    if (rank /= 0) return
    allocate (s(0:n + 1), snew(0:n + 1))
    call initial(s, 1, n, n)
    worst = 0
    slast = steps
    do sstep = 1, steps
      call advance(s, snew, n, sumsq)
      s(1:n) = snew(1:n)
      if (sstep > last) then
        ok = 0
        write (error_unit, '(a,i0,a)') 'heat1d check: the parallel run stopped at step ', last, &
          ' before the serial one'
        exit
      end if
      rel = abs(sqrt(sumsq) - history(sstep))/max(sqrt(sumsq), tiny(1.0_c_double))
      worst = max(worst, rel)
      if (rel > 1.0e-12_c_double) then
        ok = 0
        write (error_unit, '(a,i0,2(a,es22.15))') 'heat1d check: step ', sstep, ': residual ', history(sstep), &
          ', serial ', sqrt(sumsq)
        exit
      end if
      if (sqrt(sumsq) < tol) then
        slast = sstep
        exit
      end if
    end do
    if (ok == 1 .and. slast /= last) then
      ok = 0
      write (error_unit, '(2(a,i0))') 'heat1d check: serial run stopped at step ', slast, ', parallel at ', last
    end if
    do i = 1, n
      if (ok == 1 .and. field(i) /= s(i)) then
        ok = 0
        write (error_unit, '(a,i0,2(a,es22.15))') 'heat1d check: u(', i, ') = ', field(i), ', serial ', s(i)
      end if
    end do
    if (ok == 1) write (output_unit, '(a,i0,a,es9.2)') 'heat1d check: OK: field identical to the serial run at ', &
      n, ' points, residuals within a relative ', worst
    if (ok /= 1) write (output_unit, '(a)') 'heat1d check: FAILED'
  end function check_serial

end program heat1d
