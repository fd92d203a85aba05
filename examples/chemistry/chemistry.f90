! chemistry.f90: the time loop of chemistry.c in Fortran, against the titus module.
!
! A 2-D grid of nx x ny cells in slabs along x across ranks; a hot flame front crosses it;
! every cell integrates the Oregonator with Arrhenius temperature dependence over dt with
! an adaptive ROS2 solver (see chemistry.c). Each step: cells -> tasks -> titus_run ->
! results -> update, first with balancer=none and then with stealing (default options
! otherwise); every rank checks both against a sequential run of its slab.
!
! Figures, as in chemistry.c: TITUS's efficiency (sum of task time / sum of step time x
! workers); nominal efficiency T_seq / (P x T), with T_seq the calibrated cost of every
! cell of every step (the sequential reference's time per step, summed over the ranks'
! slabs, timed one rank after the other: each rank states its own with titus_nominal_work and the job stats' nominal_s
! sums them), P the run's worker threads summed over ranks (a core each), T the run's
! wall time on rank 0; speed-up T_none / T_titus.
! `--json` prints them as one JSON object (keys as chemistry.c's, but for dt).
!
! Flags as chemistry.c's: --nx N --ny N --steps N (or the three positionally), --ref-passes
! P (the reference's passes per step, their median the step's calibrated cost; 3),
! --repeat R (the reference, no balancing and balancing R times back to back, the order of
! the two Titus runs alternating; each figure the median over the repeats), --options
! "titus options" (the balanced run's; the unbalanced one adds balancer=none), --json.
!
! Task procedures are `recursive` (no static locals): workers call them concurrently.
! Build: gfortran -O2 chemistry.f90 $(pkg-config --cflags --libs titus)
! Run:   titus launch -n 2 -- ./chemistry-f [--nx N --ny N --steps N] [--repeat R] [--json]
module cells
  use, intrinsic :: iso_c_binding
  implicit none
  real(c_double), parameter :: s = 77.27d0, q = 8.375d-6, w = 0.161d0
  real(c_double), parameter :: t_cold = 300d0, t_hot = 2000d0, t_act = 8000d0
  real(c_double), parameter :: pi = 3.141592653589793d0
contains
  recursive subroutine rhs(y, a, f)
    real(c_double), intent(in) :: y(3), a
    real(c_double), intent(out) :: f(3)
    f(1) = a * s * (y(2) + y(1) * (1d0 - q * y(1) - y(2)))
    f(2) = a * (y(3) - (1d0 + y(1)) * y(2)) / s
    f(3) = a * w * (y(1) - y(3))
  end subroutine rhs

  recursive subroutine solve3(m_in, b, x)
    real(c_double), intent(in) :: m_in(3, 3), b(3)
    real(c_double), intent(out) :: x(3)
    real(c_double) :: m(3, 3), v(3), l, tmp(3), tb
    integer :: k, i, p
    m = m_in
    v = b
    do k = 1, 3
      p = k - 1 + maxloc(abs(m(k:3, k)), 1)
      if (p /= k) then
        tmp = m(k, :); m(k, :) = m(p, :); m(p, :) = tmp
        tb = v(k); v(k) = v(p); v(p) = tb
      end if
      do i = k + 1, 3
        l = m(i, k) / m(k, k)
        m(i, k:3) = m(i, k:3) - l * m(k, k:3)
        v(i) = v(i) - l * v(k)
      end do
    end do
    do i = 3, 1, -1
      x(i) = (v(i) - sum(m(i, i + 1:3) * x(i + 1:3))) / m(i, i)
    end do
  end subroutine solve3

  ! Integrates one cell over [0, dt]; returns the solver's step count.
  recursive integer function integrate(y, temp, dt) result(steps)
    real(c_double), intent(inout) :: y(3)
    real(c_double), intent(in) :: temp, dt
    real(c_double), parameter :: rtol = 1d-4, atol = 1d-6
    real(c_double) :: g, a, t, h, jac(3, 3), m(3, 3), f0(3), k1(3), k2(3), y1(3), f1(3)
    real(c_double) :: yn(3), e(3), err, fac
    integer :: i
    g = 1d0 + 1d0 / sqrt(2d0)
    a = exp(t_act * (1d0 / t_hot - 1d0 / temp))
    t = 0d0
    h = min(dt, 1d-3)
    steps = 0
    do while (t < dt .and. steps < 1000000)
      if (t + h > dt) h = dt - t
      jac(1, :) = a * [s * (1d0 - 2d0 * q * y(1) - y(2)), s * (1d0 - y(1)), 0d0]
      jac(2, :) = a * [-y(2) / s, -(1d0 + y(1)) / s, 1d0 / s]
      jac(3, :) = a * [w, 0d0, -w]
      m = -g * h * jac
      do i = 1, 3
        m(i, i) = m(i, i) + 1d0
      end do
      call rhs(y, a, f0)
      call solve3(m, f0, k1)
      y1 = y + h * k1
      call rhs(y1, a, f1)
      call solve3(m, f1 - 2d0 * k1, k2)
      yn = y + 1.5d0 * h * k1 + 0.5d0 * h * k2
      e = 0.5d0 * h * (k1 + k2) / (atol + rtol * max(abs(y), abs(yn)))
      err = sqrt(sum(e * e) / 3d0)
      steps = steps + 1
      if (err <= 1d0) then
        t = t + h
        y = yn
      end if
      fac = 5d0
      if (err > 0d0) fac = 0.9d0 / sqrt(err)
      h = h * min(5d0, max(0.2d0, fac))
    end do
  end function integrate

  ! The task: payload (y1, y2, y3, T, dt, pad), result (y1, y2, y3, steps).
  recursive integer(c_int) function cell_task(payload, plen, result, cap, rlen, ctx) bind(C)
    type(c_ptr), value :: payload, result, ctx
    integer(c_size_t), value :: plen, cap
    integer(c_size_t), intent(out) :: rlen
    real(c_double), pointer :: p(:), r(:)
    real(c_double) :: y(3)
    cell_task = 1
    rlen = 0
    if (c_associated(ctx)) return  ! no context is registered
    if (plen /= 48 .or. cap < 32) return
    call c_f_pointer(payload, p, [6])
    call c_f_pointer(result, r, [4])
    y = p(1:3)
    r(4) = integrate(y, p(4), p(5))
    r(1:3) = y
    rlen = 32
    cell_task = 0
  end function cell_task

  real(c_double) function temperature(x, y, ny, xf)
    integer, intent(in) :: x, y, ny
    real(c_double), intent(in) :: xf
    real(c_double) :: d
    d = (x - xf - 2d0 * sin(2d0 * pi * y / ny)) / 2d0
    temperature = t_cold + (t_hot - t_cold) * exp(-d * d)
  end function temperature
end module cells

program chemistry
  use, intrinsic :: iso_c_binding
  use titus
  use cells
  implicit none
  integer :: nx = 64, ny = 32, steps = 8, rank, size, x0, x1, n, ierr
  integer :: passes = 3, repeats = 1, r, i, npos, nums(3)
  real(c_double), parameter :: dt = 300d0
  real(c_double), allocatable, target :: ref(:, :), st(:, :, :), tin(:, :), tout(:, :)
  real(c_double), allocatable :: t_seq(:), pass_s(:)
  ! Per repeat: seq_s, none_s, titus_s, efficiency none/titus, nominal none/titus, speed-up.
  real(c_double), allocatable :: rep(:, :)
  real(c_double) :: m(8)
  integer(c_int64_t), allocatable :: keys(:), hint_ns(:)
  integer(c_int), allocatable :: prio(:)
  integer(c_int) :: workers
  type(c_ptr) :: t
  character(len=512) :: arg, options
  logical :: ok, json

  json = .false.
  options = ""
  npos = 0
  nums = [nx, ny, steps]
  i = 1
  do while (i <= command_argument_count())
    call get_command_argument(i, arg)
    select case (trim(arg))
    case ("--json")
      json = .true.
    case ("--nx")
      nums(1) = flag_value(i)
    case ("--ny")
      nums(2) = flag_value(i)
    case ("--steps")
      nums(3) = flag_value(i)
    case ("--ref-passes")
      passes = flag_value(i)
    case ("--repeat")
      repeats = flag_value(i)
    case ("--options")
      if (i == command_argument_count()) call usage("--options: expected titus options")
      i = i + 1
      call get_command_argument(i, options)
    case default
      if (arg(1:1) == "-" .or. npos >= 3) call usage("unknown argument '"//trim(arg)//"'")
      npos = npos + 1
      nums(npos) = positive(arg, "a positional argument")
    end select
    i = i + 1
  end do
  nx = nums(1)
  ny = nums(2)
  steps = nums(3)
  if (int(nx, 8) * ny > 2_8**26) call usage("--nx x --ny: at most 2^26 cells")
  if (repeats > 1000) call usage("--repeat: at most 1000")
  ! Who am I: a first runtime, without balancing.
  t = c_null_ptr
  call check(titus_init(t, "workers=1,balancer=none"//c_null_char), "titus_init")
  call check(titus_rank_size(t, rank, size), "titus_rank_size")
  x0 = int(int(nx, 8) * rank / size)
  x1 = int(int(nx, 8) * (rank + 1) / size)
  n = (x1 - x0) * ny
  allocate(ref(3, max(n, 1)), st(3, max(n, 1), 2), tin(6, max(n, 1)), tout(4, max(n, 1)))
  allocate(t_seq(0:steps - 1), pass_s(passes), rep(8, repeats))
  ! A cell's key is its global index: the same every step, so Titus predicts its cost
  ! from the last step's. Hints: cells in the flame (hot) get priority 1 — they run first
  ! and are shared last, so no costly cell is left for the end of a step; no cost hint (0:
  ! Titus's own measured prediction).
  allocate(keys(max(n, 1)), prio(max(n, 1)), hint_ns(max(n, 1)))
  do i = 1, n
    keys(i) = int(x0, c_int64_t) * ny + (i - 1)
  end do
  hint_ns = 0

  ok = .true.
  do r = 1, repeats
    if (.not. c_associated(t)) call check(titus_init(t, "workers=1,balancer=none"//c_null_char), &
        "titus_init")
    call one_repeat(r, t)
    t = c_null_ptr
    if (rank == 0 .and. .not. json .and. repeats > 1) then
      write (*, '(a,i0,*(a))') "repeat ", r - 1, " (", &
          trim(merge("titus", "none ", mod(r - 1, 2) == 1)), " first): sequential ", &
          num_text(rep(1, r), 3), " s, none ", num_text(rep(2, r), 3), " s, titus ", num_text(rep(3, r), 3), &
          " s, nominal efficiency none ", num_text(rep(6, r), 3), " titus ", num_text(rep(7, r), 3), &
          ", speed-up ", num_text(rep(8, r), 2), "x"
    end if
  end do
  do i = 1, 8
    m(i) = median(rep(i, :))
  end do

  if (rank == 0 .and. .not. json) then
    write (*, '(a,i0,a,i0,a,i0,a,i0,a,i0,a,a,a)') "chemistry (Fortran): ", nx, "x", ny, " cells, ", &
        size, " ranks, ", workers, " workers in all, ", steps, " steps, titus options """, &
        trim(options), """"
    if (repeats > 1) write (*, '(a,i0,a)') "medians of ", repeats, " repeats:"
    write (*, '(a,f8.3,a)') "total: sequential reference ", m(1), &
        " s (all ranks' cells, calibrated cost)"
    write (*, '(a6,a11,a13,a21)') "run", "time_s", "efficiency", "nominal_efficiency"
    write (*, '(a6,f11.3,f13.3,f21.3)') "none", m(2), m(4), m(6)
    write (*, '(a6,f11.3,f13.3,f21.3)') "titus", m(3), m(5), m(7)
    if (repeats > 1) write (*, '(4a)') "titus nominal efficiency over the repeats: ", &
        num_text(minval(rep(7, :)), 3), " to ", num_text(maxval(rep(7, :)), 3)
    write (*, '(a,f5.2,a)') "speed-up over none ", m(8), "x"
  end if
  if (rank == 0 .and. json) then
    write (*, '(a,i0,a,i0,a,i0,a,i0,a,i0,a,i0,19a)', advance='no') &
        '{"nx":', nx, ',"ny":', ny, ',"ranks":', size, ',"workers":', workers, &
        ',"steps":', steps, ',"repeat":', repeats, &
        ',"seq_s":', jnum(m(1)), ',"none_s":', jnum(m(2)), &
        ',"titus_s":', jnum(m(3)), ',"efficiency_none":', jnum(m(4)), &
        ',"efficiency_titus":', jnum(m(5)), ',"nominal_efficiency_none":', jnum(m(6)), &
        ',"nominal_efficiency":', jnum(m(7)), ',"speedup":', jnum(m(8)), &
        ',"nominal_efficiency_min":', jnum(minval(rep(7, :))), ',"nominal_efficiency_max":'
    write (*, '(a)', advance='no') jnum(maxval(rep(7, :)))//',"nominal_efficiency_runs":['
    do r = 1, repeats
      write (*, '(a)', advance='no') trim(merge(",", " ", r > 1))//jnum(rep(7, r))
    end do
    write (*, '(a)', advance='no') '],"speedup_runs":['
    do r = 1, repeats
      write (*, '(a)', advance='no') trim(merge(",", " ", r > 1))//jnum(rep(8, r))
    end do
    write (*, '(a)') ']}'
  end if
  flush (6)
  if (ok) then
    write (0, '(a,i0,a,i0,a,i0,a,i0,a)') "rank ", rank, ": results equal the sequential run (", n, &
        " cells x ", steps, " steps, ", repeats, " repeats)"
  else
    write (0, '(a,i0,a)') "rank ", rank, ": RESULTS DIFFER FROM the sequential run"
    stop 1
  end if

contains
  ! One repeat: the reference (on the first runtime `first`, which it finalizes), then the
  ! time loop through Titus with no balancing and with the chosen options (in that order,
  ! or the other on even repeats), checked against the reference; its figures in rep(:, r).
  subroutine one_repeat(r, first)
    integer, intent(in) :: r
    type(c_ptr), intent(inout) :: first
    type(titus_stats) :: js
    type(c_ptr) :: h
    real(c_double) :: times(2), eff(2), nominal(2), nwork(2), t0, t1, busy, avail
    integer :: pass, turn, step, c, p, k
    ! The sequential reference, timed per step while the other ranks wait (one rank after
    ! the other; the first runtime's job stats are the barrier): the calibrated cost of
    ! this rank's cells on one core of an otherwise idle machine, the median of `passes`.
    do k = 1, rank
      call check(titus_job_stats(first, js), "titus_job_stats")
    end do
    ref(:, 1:n) = spread([1d0, 2d0, 3d0], 2, n)
    do step = 0, steps - 1
      call inputs(ref, step)
      do p = 1, passes
        call system_clock_s(t0)
        do c = 1, n
          ref(:, c) = tin(1:3, c)
          ierr = integrate(ref(:, c), tin(4, c), tin(5, c))
        end do
        call system_clock_s(t1)
        pass_s(p) = t1 - t0
      end do
      t_seq(step) = median(pass_s)
    end do
    do k = rank, size - 1
      call check(titus_job_stats(first, js), "titus_job_stats")
    end do
    call check(titus_finalize(first), "titus_finalize")

    do turn = 1, 2
      ! pass 1: no balancing, pass 2: the chosen options; the titus run first on even r.
      pass = merge(3 - turn, turn, mod(r - 1, 2) == 1)
      h = c_null_ptr
      if (pass == 1) then
        if (len_trim(options) > 0) then
          call check(titus_init(h, trim(options)//",balancer=none"//c_null_char), "titus_init")
        else
          call check(titus_init(h, "balancer=none"//c_null_char), "titus_init")
        end if
      else
        call check(titus_init(h, trim(options)//c_null_char), "titus_init")
      end if
      call check(titus_register(h, 1_c_int, c_funloc(cell_task), c_null_ptr), "titus_register")
      st(:, 1:n, pass) = spread([1d0, 2d0, 3d0], 2, n)
      busy = 0d0
      avail = 0d0
      nominal(pass) = 0d0
      times(pass) = 0d0
      do step = 0, steps - 1
        call inputs(st(:, :, pass), step)
        call system_clock_s(t0)
        call check(titus_tasks_fixed(h, 1_c_int, c_loc(tin), 48_c_size_t, int(n, c_size_t)), &
            "titus_tasks_fixed")
        call check(titus_task_keys(h, keys, int(n, c_size_t)), "titus_task_keys")
        prio(1:n) = merge(1, 0, tin(4, 1:n) > 0.5d0 * (t_cold + t_hot))
        call check(titus_task_hints(h, prio, hint_ns, int(n, c_size_t)), "titus_task_hints")
        call check(titus_nominal_work(h, t_seq(step)), "titus_nominal_work")
        call check(titus_run(h), "titus_run")
        call check(titus_results_fixed(h, c_loc(tout), 32_c_size_t, int(n, c_size_t)), &
            "titus_results_fixed")
        call system_clock_s(t1)
        times(pass) = times(pass) + (t1 - t0)
        st(:, 1:n, pass) = tout(1:3, 1:n)
        call check(titus_job_stats(h, js), "titus_job_stats")
        busy = busy + js%busy_s
        avail = avail + js%session_s * js%workers
        nominal(pass) = nominal(pass) + js%nominal_s
        nwork(pass) = real(js%workers, c_double)
      end do
      eff(pass) = busy / max(avail, 1d-300)
      if (pass == 2) workers = int(js%workers, c_int)
      call check(titus_finalize(t), "titus_finalize")
    end do
    ok = ok .and. all(st(:, 1:n, 1) == ref(:, 1:n)) .and. all(st(:, 1:n, 2) == ref(:, 1:n))
    ! Both runs stated the same calibrated costs: the job's T_seq, against their cores.
    rep(:, r) = [nominal(2), times(1), times(2), eff(1), eff(2), &
        nominal(1) / (nwork(1) * max(times(1), 1d-300)), &
        nominal(2) / (nwork(2) * max(times(2), 1d-300)), times(1) / max(times(2), 1d-300)]
  end subroutine one_repeat

  subroutine inputs(state, step)
    real(c_double), intent(in) :: state(:, :)
    integer, intent(in) :: step
    real(c_double) :: xf
    integer :: k, x, y
    xf = nx * (0.1d0 + 0.8d0 * step / max(steps - 1, 1))
    k = 0
    do x = x0, x1 - 1
      do y = 0, ny - 1
        k = k + 1
        tin(1:3, k) = state(:, k)
        tin(4, k) = temperature(x, y, ny, xf)
        tin(5, k) = dt
        tin(6, k) = 0d0
      end do
    end do
  end subroutine inputs

  ! The median of `v` (the mean of the middle two for an even count; `size` is the
  ! program's rank count here, so bounds say the length).
  real(c_double) function median(v)
    real(c_double), intent(in) :: v(:)
    real(c_double) :: w(ubound(v, 1)), x
    integer :: a, b
    w = v
    do a = 2, ubound(w, 1)
      x = w(a)
      b = a - 1
      do while (b >= 1)
        if (w(b) <= x) exit
        w(b + 1) = w(b)
        b = b - 1
      end do
      w(b + 1) = x
    end do
    b = ubound(w, 1)
    median = 0.5d0 * (w((b + 1) / 2) + w(b / 2 + 1))
  end function median

  ! The positive integer after flag i (which moves past it); a usage error otherwise.
  integer function flag_value(i) result(v)
    integer, intent(inout) :: i
    character(len=512) :: flag, val
    call get_command_argument(i, flag)
    if (i == command_argument_count()) call usage(trim(flag)//": expected a positive integer")
    i = i + 1
    call get_command_argument(i, val)
    v = positive(val, trim(flag))
  end function flag_value

  integer function positive(text, what) result(v)
    character(len=*), intent(in) :: text, what
    integer :: e
    read (text, *, iostat=e) v
    if (e /= 0 .or. verify(trim(text), "0123456789") /= 0) v = 0
    if (v <= 0 .or. v > 2**20) &
        call usage(what//": '"//trim(text)//"': expected a positive integer up to 2^20")
  end function positive

  subroutine usage(why)
    character(len=*), intent(in) :: why
    write (0, '(a)') "chemistry-f: "//why//" (usage: chemistry-f [--nx N --ny N --steps N " &
        //"| nx ny steps] [--ref-passes P] [--repeat R] [--options ""titus options""] [--json])"
    stop 2, quiet=.true.
  end subroutine usage

  ! A number with `d` decimals and the leading zero Fortran's f0 leaves out.
  function num_text(v, d) result(str)
    real(c_double), intent(in) :: v
    integer, intent(in) :: d
    character(len=:), allocatable :: str
    character(len=40) :: buf
    character(len=8) :: f
    write (f, '(a,i0,a)') '(f0.', d, ')'
    write (buf, f) v
    str = trim(adjustl(buf))
    if (str(1:1) == '.') str = '0'//str
    if (len(str) > 1) then
      if (str(1:2) == '-.') str = '-0'//str(2:)
    end if
  end function num_text

  ! A number for JSON: six decimals.
  function jnum(v) result(str)
    real(c_double), intent(in) :: v
    character(len=:), allocatable :: str
    str = num_text(v, 6)
  end function jnum

  subroutine system_clock_s(v)
    real(c_double), intent(out) :: v
    integer(8) :: count, rate
    call system_clock(count, rate)
    v = real(count, c_double) / real(rate, c_double)
  end subroutine system_clock_s

  subroutine check(code, what)
    integer(c_int), intent(in) :: code
    character(len=*), intent(in) :: what
    if (code /= TITUS_OK) then
      write (0, '(a,a,a,a)') "chemistry: ", what, " failed: ", titus_error_message()
      stop 2
    end if
  end subroutine check
end program chemistry
