! Tasks that spawn tasks from Fortran (run by tests/capi.rs, 1 or more ranks): every rank
! hands over one root; a task at level < 6 spawns three children through titus_spawn, and
! returns (1, its level) as the reduction's lanes (option spawn=sum+max). Every rank
! checks the job's reduction (titus_reduced): 1,092 spawned tasks per root, deepest 6.
module spawn_tree
  use, intrinsic :: iso_c_binding
  use titus
  implicit none
contains
  recursive integer(c_int) function expand(task, payload, plen, result, cap, rlen, ctx) bind(C)
    type(c_ptr), value :: task, payload, result, ctx
    integer(c_size_t), value :: plen, cap
    integer(c_size_t), intent(out) :: rlen
    integer(c_int64_t), pointer :: p(:), r(:)
    integer(c_int64_t), target :: child(2)
    integer :: i
    expand = 1
    rlen = 0
    if (c_associated(ctx)) return  ! no context is registered
    if (plen /= 16 .or. cap < 16) return
    call c_f_pointer(payload, p, [2])
    call c_f_pointer(result, r, [2])
    if (p(1) < 6) then
      do i = 1, 3
        child(1) = p(1) + 1
        child(2) = p(2) * 3 + i
        if (titus_spawn(task, 0_c_int, c_loc(child), 16_c_size_t) /= TITUS_OK) return
      end do
    end if
    r(1) = 1
    r(2) = p(1)
    rlen = 16
    expand = 0
  end function expand
end module spawn_tree

program spawn
  use, intrinsic :: iso_c_binding
  use titus
  use spawn_tree
  implicit none
  type(c_ptr) :: t = c_null_ptr
  integer(c_int) :: rank, size
  integer(c_int64_t), target :: root(2), values(2), none(2)
  integer(c_size_t) :: lanes
  if (titus_init(t, "workers=2 spawn=sum+max"//c_null_char) /= TITUS_OK) stop 1
  if (titus_rank_size(t, rank, size) /= TITUS_OK) stop 1
  if (titus_register_spawning(t, 0_c_int, c_funloc(expand), c_null_ptr) /= TITUS_OK) stop 1
  ! Outside a running task: refused.
  none = 0
  if (titus_spawn(c_null_ptr, 0_c_int, c_loc(none), 16_c_size_t) /= TITUS_ERR_INVALID) stop 2
  root(1) = 0
  root(2) = rank
  if (titus_task(t, 0_c_int, c_loc(root), 16_c_size_t) /= TITUS_OK) stop 1
  if (titus_run(t) /= TITUS_OK) stop 3
  if (titus_reduced(t, values, 2_c_size_t, lanes) /= TITUS_OK) stop 4
  if (lanes /= 2 .or. values(1) /= 1092_c_int64_t * size .or. values(2) /= 6) then
    print '(a, i0, a, i0, a, i0)', 'rank ', rank, ': reduced ', values(1), ', ', values(2)
    stop 5
  end if
  print '(a, i0, a, i0, a)', 'rank ', rank, ' of ', size, ': fortran spawned trees right'
  if (titus_finalize(t) /= TITUS_OK) stop 1
end program spawn
