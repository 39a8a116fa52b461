// The sanitizers' settings, built into every test, example and benchmark of
// a sanitized build (troupe_dev_flags adds this file when TROUPE_SANITIZE is
// set). They used to come only from ctest's ENVIRONMENT property, but
// catch_discover_tests flattens a property's list: a test given two
// variables got the first alone, so the PostgreSQL tests (their server's
// address first) ran under ThreadSanitizer without its suppressions. Built
// in, they hold for every process, however it is started; TSAN_OPTIONS and
// UBSAN_OPTIONS in the environment still add to them or override them.

extern "C" {

#if defined(__SANITIZE_THREAD__)
const char* __tsan_default_options() {
  return "halt_on_error=1 second_deadlock_stack=1 suppressions=" TROUPE_TSAN_SUPPRESSIONS;
}
#endif

#if defined(TROUPE_UBSAN)
const char* __ubsan_default_options() {
  return "print_stacktrace=1 halt_on_error=1";
}
#endif

} // extern "C"
