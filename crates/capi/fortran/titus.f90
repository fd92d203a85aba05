! titus.f90: the Fortran module of libtitus (iso_c_binding), one binding per function of
! titus.h, with the same names, arguments and error codes. Strings passed to Titus end in
! c_null_char; titus_error_message() turns titus_last_error() into a Fortran string.
!
!   use titus
!   type(c_ptr) :: t = c_null_ptr
!   ierr = titus_init(t, "workers=2"//c_null_char)
!   ierr = titus_register(t, 1_c_int, c_funloc(my_task), c_null_ptr)
!   ierr = titus_tasks_fixed(t, 1_c_int, c_loc(cells), int(storage_size(cells(1))/8, c_size_t), n)
!   ierr = titus_run(t)
!   ierr = titus_results_fixed(t, c_loc(out), int(storage_size(out(1))/8, c_size_t), n)
!   ierr = titus_finalize(t)
!
! A task function is `integer(c_int) function f(payload, payload_len, result, capacity,
! result_len, ctx) bind(C)` with `type(c_ptr), value` pointers and `integer(c_size_t), value`
! lengths (see titus_task_fn below); it runs on worker threads and must be thread-safe.
module titus
  use, intrinsic :: iso_c_binding
  implicit none

  integer(c_int), parameter :: TITUS_OK = 0
  integer(c_int), parameter :: TITUS_ERR_NOT_INITIALIZED = 1
  integer(c_int), parameter :: TITUS_ERR_ALREADY_INITIALIZED = 2
  integer(c_int), parameter :: TITUS_ERR_INVALID = 3
  integer(c_int), parameter :: TITUS_ERR_BUFFER_TOO_SMALL = 4
  integer(c_int), parameter :: TITUS_ERR_NO_TASKS = 5
  integer(c_int), parameter :: TITUS_ERR_TASK = 6
  integer(c_int), parameter :: TITUS_ERR_EPOCH = 7
  integer(c_int), parameter :: TITUS_ERR_FABRIC = 8
  integer(c_int), parameter :: TITUS_ERR_EXCHANGE = 9
  integer(c_int), parameter :: TITUS_ERR_INTERNAL = 10

  ! struct titus_stats
  type, bind(C) :: titus_stats
    real(c_double) :: session_s, busy_s, idle_s, steal_s, efficiency
    integer(c_int64_t) :: workers, tasks_owned, tasks_run, tasks_run_for_others, tasks_stolen
    integer(c_int64_t) :: tasks_ran_elsewhere
    integer(c_int64_t) :: steal_attempts, steals_ok, steals_empty, steals_locked, bytes_stolen
    integer(c_int64_t) :: chunks_sent, chunks_received, bytes_results, records_forwarded
    real(c_double) :: nominal_s, nominal_efficiency
    real(c_double) :: start_s
    integer(c_int64_t) :: start_bytes, start_messages, start_rounds
  end type titus_stats

  abstract interface
    ! titus_task_fn
    integer(c_int) function titus_task_fn(payload, payload_len, result, result_capacity, &
        result_len, ctx) bind(C)
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: payload
      integer(c_size_t), value :: payload_len
      type(c_ptr), value :: result
      integer(c_size_t), value :: result_capacity
      integer(c_size_t), intent(out) :: result_len
      type(c_ptr), value :: ctx
    end function titus_task_fn

    ! titus_allgather_fn
    integer(c_int) function titus_allgather_fn(send, len, recv, ctx) bind(C)
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: send
      integer(c_size_t), value :: len
      type(c_ptr), value :: recv
      type(c_ptr), value :: ctx
    end function titus_allgather_fn

    ! titus_launch_fn: a resource takes a task (titus_add_resource)
    integer(c_int) function titus_launch_fn(kind, payload, payload_len, handle, ctx) bind(C)
      import :: c_int, c_ptr, c_size_t, c_int64_t
      integer(c_int), value :: kind
      type(c_ptr), value :: payload
      integer(c_size_t), value :: payload_len
      integer(c_int64_t), intent(out) :: handle   ! uint64_t in C
      type(c_ptr), value :: ctx
    end function titus_launch_fn

    ! titus_test_fn: a resource reports one finished task, if any (done = 0: none)
    integer(c_int) function titus_test_fn(handle, result, result_capacity, result_len, &
        done, ctx) bind(C)
      import :: c_int, c_ptr, c_size_t, c_int64_t
      integer(c_int64_t), intent(out) :: handle   ! uint64_t in C
      type(c_ptr), value :: result
      integer(c_size_t), value :: result_capacity
      integer(c_size_t), intent(out) :: result_len
      integer(c_int), intent(out) :: done
      type(c_ptr), value :: ctx
    end function titus_test_fn
  end interface

  interface
    integer(c_int) function titus_init(handle, options) bind(C, name="titus_init")
      import :: c_int, c_ptr, c_char
      type(c_ptr), intent(inout) :: handle
      character(kind=c_char), dimension(*), intent(in) :: options
    end function titus_init

    integer(c_int) function titus_init_exchange(handle, rank, size, allgather, ctx, options) &
        bind(C, name="titus_init_exchange")
      import :: c_int, c_ptr, c_char, c_funptr
      type(c_ptr), intent(inout) :: handle
      integer(c_int), value :: rank, size
      type(c_funptr), value :: allgather
      type(c_ptr), value :: ctx
      character(kind=c_char), dimension(*), intent(in) :: options
    end function titus_init_exchange

    integer(c_int) function titus_register(t, kind, task, ctx) bind(C, name="titus_register")
      import :: c_int, c_ptr, c_funptr
      type(c_ptr), value :: t
      integer(c_int), value :: kind
      type(c_funptr), value :: task
      type(c_ptr), value :: ctx
    end function titus_register

    ! A resource beside the CPU workers (an accelerator's queue): launch and test are
    ! c_funloc of titus_launch_fn / titus_test_fn procedures; nkinds = 0: every kind at
    ! speed speeds(1).
    integer(c_int) function titus_add_resource(t, name, capacity, kinds, speeds, nkinds, &
        launch, test, ctx) bind(C, name="titus_add_resource")
      import :: c_int, c_ptr, c_char, c_size_t, c_double, c_funptr
      type(c_ptr), value :: t
      character(kind=c_char), dimension(*), intent(in) :: name
      integer(c_int), value :: capacity
      integer(c_int), intent(in) :: kinds(*)
      real(c_double), intent(in) :: speeds(*)
      integer(c_size_t), value :: nkinds
      type(c_funptr), value :: launch, test
      type(c_ptr), value :: ctx
    end function titus_add_resource

    integer(c_int) function titus_task(t, kind, payload, len) bind(C, name="titus_task")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: t
      integer(c_int), value :: kind
      type(c_ptr), value :: payload
      integer(c_size_t), value :: len
    end function titus_task

    integer(c_int) function titus_tasks_fixed(t, kind, records, record_size, count) &
        bind(C, name="titus_tasks_fixed")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: t
      integer(c_int), value :: kind
      type(c_ptr), value :: records
      integer(c_size_t), value :: record_size, count
    end function titus_tasks_fixed

    integer(c_int) function titus_tasks_var(t, kind, data, offsets, count) &
        bind(C, name="titus_tasks_var")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: t
      integer(c_int), value :: kind
      type(c_ptr), value :: data
      integer(c_size_t), dimension(*), intent(in) :: offsets
      integer(c_size_t), value :: count
    end function titus_tasks_var

    integer(c_int) function titus_run(t) bind(C, name="titus_run")
      import :: c_int, c_ptr
      type(c_ptr), value :: t
    end function titus_run

    ! A task function that may spawn (option spawn=LANES): titus_task_fn's arguments after
    ! `task`, a type(c_ptr), value handle for titus_spawn, valid only during the call.
    integer(c_int) function titus_register_spawning(t, kind, task, ctx) &
        bind(C, name="titus_register_spawning")
      import :: c_int, c_ptr, c_funptr
      type(c_ptr), value :: t
      integer(c_int), value :: kind
      type(c_funptr), value :: task
      type(c_ptr), value :: ctx
    end function titus_register_spawning

    integer(c_int) function titus_spawn(task, kind, payload, len) bind(C, name="titus_spawn")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: task
      integer(c_int), value :: kind
      type(c_ptr), value :: payload
      integer(c_size_t), value :: len
    end function titus_spawn

    integer(c_int) function titus_hand_over(task) bind(C, name="titus_hand_over")
      import :: c_int, c_ptr
      type(c_ptr), value :: task
    end function titus_hand_over

    ! As titus_spawn, under `key`: with spawn=home the result comes home with it.
    integer(c_int) function titus_spawn_keyed(task, key, kind, payload, len) &
        bind(C, name="titus_spawn_keyed")
      import :: c_int, c_ptr, c_size_t, c_int64_t
      type(c_ptr), value :: task
      integer(c_int64_t), value :: key
      integer(c_int), value :: kind
      type(c_ptr), value :: payload
      integer(c_size_t), value :: len
    end function titus_spawn_keyed

    ! `combine` is a bind(C) subroutine (acc, value, lanes, ctx): acc(lanes) folded with
    ! value(lanes), both integer(c_int64_t); lanes is integer(c_size_t), value.
    integer(c_int) function titus_set_combine(t, identity, lanes, combine, ctx) &
        bind(C, name="titus_set_combine")
      import :: c_int, c_ptr, c_size_t, c_int64_t, c_funptr
      type(c_ptr), value :: t
      integer(c_int64_t), intent(in) :: identity(*)
      integer(c_size_t), value :: lanes
      type(c_funptr), value :: combine
      type(c_ptr), value :: ctx
    end function titus_set_combine

    integer(c_int) function titus_spawned_count(t, count) bind(C, name="titus_spawned_count")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: t
      integer(c_size_t), intent(out) :: count
    end function titus_spawned_count

    integer(c_int) function titus_spawned_result(t, index, key, buf, capacity, len) &
        bind(C, name="titus_spawned_result")
      import :: c_int, c_ptr, c_size_t, c_int64_t
      type(c_ptr), value :: t
      integer(c_size_t), value :: index   ! 0-based, as in C
      integer(c_int64_t), intent(out) :: key
      type(c_ptr), value :: buf
      integer(c_size_t), value :: capacity
      integer(c_size_t), intent(out) :: len
    end function titus_spawned_result

    integer(c_int) function titus_reduced(t, out_values, capacity, lanes) &
        bind(C, name="titus_reduced")
      import :: c_int, c_ptr, c_size_t, c_int64_t
      type(c_ptr), value :: t
      integer(c_int64_t), intent(out) :: out_values(*)
      integer(c_size_t), value :: capacity
      integer(c_size_t), intent(out) :: lanes
    end function titus_reduced

    integer(c_int) function titus_result_count(t, count) bind(C, name="titus_result_count")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: t
      integer(c_size_t), intent(out) :: count
    end function titus_result_count

    integer(c_int) function titus_result(t, index, buf, capacity, len) &
        bind(C, name="titus_result")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: t
      integer(c_size_t), value :: index   ! 0-based, as in C
      type(c_ptr), value :: buf
      integer(c_size_t), value :: capacity
      integer(c_size_t), intent(out) :: len
    end function titus_result

    integer(c_int) function titus_results_fixed(t, out_records, record_size, count) &
        bind(C, name="titus_results_fixed")
      import :: c_int, c_ptr, c_size_t
      type(c_ptr), value :: t
      type(c_ptr), value :: out_records
      integer(c_size_t), value :: record_size, count
    end function titus_results_fixed

    integer(c_int) function titus_rank_size(t, rank, size) bind(C, name="titus_rank_size")
      import :: c_int, c_ptr
      type(c_ptr), value :: t
      integer(c_int), intent(out) :: rank, size
    end function titus_rank_size

    ! keys(i) is the identity of the i-th task handed over since the last titus_run
    ! (count = their number); a task's measured cost predicts its cost next step.
    integer(c_int) function titus_task_keys(t, keys, count) bind(C, name="titus_task_keys")
      import :: c_int, c_ptr, c_size_t, c_int64_t
      type(c_ptr), value :: t
      integer(c_int64_t), intent(in) :: keys(*)   ! uint64_t in C
      integer(c_size_t), value :: count
    end function titus_task_keys

    ! priorities(i) and cost_ns(i) of the i-th task handed over since the last titus_run
    ! (count = their number): higher priorities run first; cost_ns is the estimated run
    ! time in ns (0: unknown), for cost-aware sharing. A priority outside -32768..32767
    ! gets TITUS_ERR_INVALID.
    integer(c_int) function titus_task_hints(t, priorities, cost_ns, count) &
        bind(C, name="titus_task_hints")
      import :: c_int, c_ptr, c_size_t, c_int64_t
      type(c_ptr), value :: t
      integer(c_int), intent(in) :: priorities(*)
      integer(c_int64_t), intent(in) :: cost_ns(*)   ! uint64_t in C
      integer(c_size_t), value :: count
    end function titus_task_hints

    ! Collective: which of this rank's tasks (keys, string order) should move for good to
    ! which neighbour rank; capacity = count always suffices.
    integer(c_int) function titus_repartition_plan(t, keys, count, move_keys, move_to, &
        capacity, n_moves) bind(C, name="titus_repartition_plan")
      import :: c_int, c_ptr, c_size_t, c_int64_t
      type(c_ptr), value :: t
      integer(c_int64_t), intent(in) :: keys(*)        ! uint64_t in C
      integer(c_size_t), value :: count
      integer(c_int64_t), intent(out) :: move_keys(*)  ! uint64_t in C
      integer(c_int), intent(out) :: move_to(*)
      integer(c_size_t), value :: capacity
      integer(c_size_t), intent(out) :: n_moves
    end function titus_repartition_plan

    ! Measured cost of each of this rank's tasks of the last titus_run, ns, task order.
    integer(c_int) function titus_costs(t, ns, count) bind(C, name="titus_costs")
      import :: c_int, c_ptr, c_size_t, c_int64_t
      type(c_ptr), value :: t
      integer(c_int64_t), intent(out) :: ns(*)    ! uint64_t in C
      integer(c_size_t), value :: count
    end function titus_costs

    integer(c_int) function titus_nominal_work(t, seconds) bind(C, name="titus_nominal_work")
      import :: c_int, c_ptr, c_double
      type(c_ptr), value :: t
      real(c_double), value :: seconds
    end function titus_nominal_work

    integer(c_int) function titus_stats_get(t, stats) bind(C, name="titus_stats_get")
      import :: c_int, c_ptr, titus_stats
      type(c_ptr), value :: t
      type(titus_stats), intent(out) :: stats
    end function titus_stats_get

    integer(c_int) function titus_job_stats(t, stats) bind(C, name="titus_job_stats")
      import :: c_int, c_ptr, titus_stats
      type(c_ptr), value :: t
      type(titus_stats), intent(out) :: stats
    end function titus_job_stats

    integer(c_int) function titus_finalize(handle) bind(C, name="titus_finalize")
      import :: c_int, c_ptr
      type(c_ptr), intent(inout) :: handle
    end function titus_finalize

    type(c_ptr) function titus_strerror(code) bind(C, name="titus_strerror")
      import :: c_int, c_ptr
      integer(c_int), value :: code
    end function titus_strerror

    type(c_ptr) function titus_last_error() bind(C, name="titus_last_error")
      import :: c_ptr
    end function titus_last_error

    type(c_ptr) function titus_version() bind(C, name="titus_version")
      import :: c_ptr
    end function titus_version

    integer(c_size_t) function titus_c_strlen(s) bind(C, name="strlen")
      import :: c_ptr, c_size_t
      type(c_ptr), value :: s
    end function titus_c_strlen
  end interface

contains

  ! A C string returned by Titus as a Fortran string.
  function titus_string(p) result(s)
    type(c_ptr), intent(in) :: p
    character(len=:), allocatable :: s
    character(kind=c_char), pointer :: chars(:)
    integer(c_size_t) :: n, i
    n = titus_c_strlen(p)
    allocate(character(len=n) :: s)
    call c_f_pointer(p, chars, [n])
    do i = 1, n
      s(i:i) = chars(i)
    end do
  end function titus_string

  ! The message of the last failed call on this thread.
  function titus_error_message() result(s)
    character(len=:), allocatable :: s
    s = titus_string(titus_last_error())
  end function titus_error_message
end module titus
