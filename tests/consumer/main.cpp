#include <relpos/relpos.hpp>
#include <cstdio>
#include <cstring>
int main() {
  // The headers' version is the library's, and the one the package file announced.
  if (std::strcmp(relpos::version(), RELPOS_VERSION_STRING) != 0 || RELPOS_VERSION_MAJOR != 0 || RELPOS_VERSION_MINOR != 2) {
    std::printf("version mismatch: library %s, headers %s\n", relpos::version(), RELPOS_VERSION_STRING);
    return 1;
  }
  relpos::Context ctx;
  relpos::T5Params p;
  p.queries = p.keys = 8;
  relpos::Buffer out(ctx, 8 * 8 * 4);
  relpos::Recorder rec(ctx);
  relpos::t5_buckets(rec, p, out);
  rec.submit_and_wait();
  bool ok = out.download<std::int32_t>(64) == relpos::t5_buckets_reference(p);
  std::printf("consumer on %s: %s\n", ctx.device_info().name.c_str(), ok ? "ok" : "MISMATCH");
  return ok && ctx.validation_message_count() == 0 ? 0 : 1;
}
