// The RocksDB store under faults nobody scripts: bytes flipped in the WAL
// and in tables, a full disk, a newer store, misleading paths, injected
// I/O errors.

#include <troupe/rocksdb/store.hpp>
#include <troupe/rocksdb/faulty_file_system.hpp>

#include <catch2/catch.hpp>

#include "../support.hpp"
#include "temp_dir.hpp"

#include <fcntl.h>
#include <sys/mount.h>
#include <csignal>
#include <sys/wait.h>
#include <unistd.h>

#include <troupe/persistence/detail/codec.hpp>
#include <troupe/rocksdb/detail/status.hpp>
#include <troupe/persistence/detail/table_check.hpp>
// The engine's own layout and RocksDB's API, which these tests reach into.
#include <troupe/rocksdb/detail/engine.hpp>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <future>
#include <fstream>
#include <list>
#include <map>
#include <optional>
#include <random>
#include <thread>
#include <utility>
#include <string>
#include <vector>

// In a namespace of its own: the tests build several files as one unit.
namespace persistence_store_faults_test {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
namespace tp = troupe::persistence;
using troupe::testing::faulty_file_system;

namespace {

std::vector<tp::event_record> one(tp::sequence_nr seq, std::string payload = "payload") {
  return {{seq, "m", 1, std::move(payload)}};
}

/// Options that open a damaged store by salvaging it.
tp::rocksdb_options salvaging() {
  tp::rocksdb_options o;
  o.salvage = true;
  return o;
}

/// The error opening the store at `path` throws (none if it opens).
std::optional<troupe::error> open_error(const std::string& path, tp::rocksdb_options o = {}) {
  try {
    tp::rocksdb_store s(path, o);
  } catch (const troupe::error& e) {
    return e;
  }
  return std::nullopt;
}

/// Runs `f` in a child process that ends with `_exit`, as `kill -9` would
/// end it: nothing is closed, only what reached the files stays.
template <class F>
void in_child_then_die(F f) {
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    int rc = 0;
    try {
      f();
    } catch (...) {
      rc = 3;
    }
    _exit(rc);
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFEXITED(status));
  REQUIRE(WEXITSTATUS(status) == 0);
}

/// A store directory that `make` fills, kept until the process ends: for
/// test cases whose sections would otherwise fork after RocksDB's threads
/// have started.
template <class Make>
const test::temp_dir& made_once(Make make) {
  static std::list<test::temp_dir> kept; // removed at exit
  make(kept.emplace_back().str());
  return kept.back();
}

/// What the file `path` holds.
std::string contents(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), {});
}

/// The MANIFEST that the store's CURRENT file names.
fs::path current_manifest(const fs::path& dir) {
  std::ifstream current(dir / "CURRENT");
  std::string name;
  std::getline(current, name);
  return dir / name;
}

/// Flushes column family `cf` of `s` to a table file, waiting for it.
void flush(tp::rocksdb_store& s, rocksdb::ColumnFamilyHandle* cf) {
  rocksdb::FlushOptions fo;
  fo.wait = true;
  REQUIRE(s.db().Flush(fo, cf).ok());
}

/// The live WAL files (`*.log`) of a store.
std::vector<fs::path> wal_files(const fs::path& dir) {
  std::vector<fs::path> out;
  for (auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ".log") out.push_back(e.path());
  std::sort(out.begin(), out.end());
  return out;
}

/// Ten events acknowledged with `sync`, then the process dies.
void ten_acknowledged_events(const std::string& dir) {
  in_child_then_die([&] {
    tp::rocksdb_store s(dir);
    for (tp::sequence_nr i = 1; i <= 10; ++i)
      if (s.write("p", one(i, std::string(200, static_cast<char>('a' + i))))) throw 1;
  });
}

/// The offset of record `k` (from 0) of a WAL or MANIFEST file's first
/// block: 7-byte headers (checksum, u16 length little-endian, type), then
/// the data.
std::size_t record_offset(const fs::path& file, int k) {
  const std::string bytes = contents(file);
  std::size_t pos = 0;
  for (int i = 0; i < k; ++i) {
    REQUIRE(pos + 7 <= bytes.size());
    pos += 7 + (std::size_t(std::uint8_t(bytes[pos + 4])) | std::size_t(std::uint8_t(bytes[pos + 5])) << 8);
  }
  REQUIRE(pos + 7 <= bytes.size());
  return pos;
}

/// The offset of the last whole record of a log file (WAL or MANIFEST).
std::size_t last_record_offset(const fs::path& file) {
  const std::string bytes = contents(file);
  std::size_t last = bytes.size();
  for (std::size_t pos = 0; pos + 7 <= bytes.size();) {
    if (32768 - pos % 32768 < 7) {
      pos += 32768 - pos % 32768;
      continue;
    }
    const auto length = std::size_t(std::uint8_t(bytes[pos + 4])) | std::size_t(std::uint8_t(bytes[pos + 5])) << 8;
    if (pos + 7 + length > bytes.size() || (length == 0 && bytes[pos + 6] == 0)) break;
    last = std::exchange(pos, pos + 7 + length);
  }
  REQUIRE(last < bytes.size());
  return last;
}

/// Every file of a directory with its content.
std::map<std::string, std::string> snapshot_of(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (auto& e : fs::recursive_directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    out[fs::relative(e.path(), dir).string()] = contents(e.path());
  }
  return out;
}

/// Writes event `seq` of `pid` until the store takes it, up to a deadline;
/// the last write's result. The store reopens itself after a failure (while
/// that fails, at most every 50 ms, and reads fail meanwhile). A
/// `sequence_mismatch` means the failed write reached the WAL after all
/// (never acknowledged, not lost either): then the next number.
std::error_code write_once_recovered(tp::rocksdb_store& s, const std::string& pid, tp::sequence_nr seq,
                                     const std::string& payload = "payload") {
  std::error_code ec;
  test::eventually(
      [&] {
        ec = s.write(pid, one(seq, payload));
        if (ec == tp::errc::sequence_mismatch) seq = s.highest_sequence_nr(pid) + 1;
        return !ec;
      },
      std::chrono::seconds(5));
  return ec;
}

/// What a salvage reported, a line each.
std::string report_of(const tp::rocksdb_store& s) {
  std::string out;
  for (auto& line : s.salvaged()) out += line + "\n";
  return out;
}

/// Salvages the store at `dir`, whose WAL holds events 5 to 10 of `p` after
/// a damage: the report names them, and none of their numbers is handed out
/// again.
void salvage_names_5_to_10(const std::string& dir) {
  tp::rocksdb_store s(dir, salvaging());
  const auto report = report_of(s);
  INFO(report);
  CHECK_THAT(report, Catch::Contains("events 5 to 10 of p dropped"));
  CHECK(s.highest_sequence_nr("p") == 10);
  CHECK(s.write("p", one(5, "replacement")) == tp::errc::sequence_mismatch); // never handed out again
}

tp::snapshot_record empty_snapshot() {
  tp::snapshot_record snapshot;
  snapshot.seq = 1;
  snapshot.payload = "{}";
  return snapshot;
}

/// A store with two live WALs: the first holds a snapshot of z, events 1
/// to 6 of p (200 bytes each) and what `more` writes; a flush of the
/// snapshots starts the second (the first stays: the journal holds its
/// events), which holds what `then` writes. In this process: a forked child
/// has no RocksDB background threads to flush with; closing flushes nothing.
template <class More, class Then>
void two_wals(const std::string& dir, More more, Then then) {
  tp::rocksdb_store s(dir);
  REQUIRE_FALSE(s.save_snapshot("z", empty_snapshot()));
  for (tp::sequence_nr i = 1; i <= 6; ++i)
    REQUIRE_FALSE(s.write("p", one(i, std::string(200, static_cast<char>('a' + i)))));
  more(s);
  flush(s, s.snapshots_cf());
  then(s);
}

/// Whether `pid`'s events replay as recovery reads them: each the number
/// after the last, or an `events_lost` record whose first number is, up to
/// the highest.
bool recovers_whole(tp::rocksdb_store& s, const std::string& pid) {
  tp::sequence_nr expected = 1;
  bool whole = true;
  auto ec = s.replay(pid, 1, tp::max_sequence_nr, UINT64_MAX, [&](const tp::event_record& e) {
    const bool lost = e.manifest == tp::events_lost_manifest;
    const bool from_expected = e.payload.find("\"from\":" + std::to_string(expected) + ",") != std::string::npos;
    if (e.seq != expected && !(lost && from_expected)) whole = false;
    expected = e.seq + 1;
  });
  return !ec && whole && expected - 1 == s.highest_sequence_nr(pid);
}

std::string u32_be(std::uint32_t v) {
  return {static_cast<char>(v >> 24), static_cast<char>(v >> 16), static_cast<char>(v >> 8), static_cast<char>(v)};
}

/// A process forked now (before this one opens the store: no lock, no
/// RocksDB thread inherited) that opens `path` when told and writes the
/// next event of "x": `opened` (and wrote), `locked`, or `failed`.
class second_process {
public:
  enum result { opened = 0, locked = 10, failed = 3 };
  explicit second_process(std::string path) {
    REQUIRE(pipe(go_) == 0);
    pid_ = fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      char c;
      if (read(go_[0], &c, 1) != 1) _exit(failed);
      int rc = opened;
      try {
        tp::rocksdb_store s(path);
        if (s.write("x", one(s.highest_sequence_nr("x") + 1, "from the second process"))) rc = failed;
      } catch (const troupe::error& e) {
        rc = e.code() == tp::errc::store_locked ? locked : failed;
      }
      _exit(rc);
    }
  }
  second_process(const second_process&) = delete;
  second_process& operator=(const second_process&) = delete;
  result try_open() {
    char c = 1;
    REQUIRE(write(go_[1], &c, 1) == 1);
    int status = 0;
    REQUIRE(waitpid(pid_, &status, 0) == pid_);
    REQUIRE(WIFEXITED(status));
    done_ = true;
    return static_cast<result>(WEXITSTATUS(status));
  }
  ~second_process() {
    if (done_) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }

private:
  int go_[2];
  pid_t pid_;
  bool done_ = false;
};

/// The code `f` returns or throws (as a `troupe::error`).
template <class F>
std::error_code code_of(F f) {
  try {
    if constexpr (std::is_void_v<decltype(f())>) {
      f();
      return {};
    } else {
      return f();
    }
  } catch (const troupe::error& e) {
    return e.code();
  }
}

} // namespace

TEST_CASE("a flipped byte in the middle of the WAL refuses to open with corrupt_store, naming the store and the file") {
  test::temp_dir dir;
  ten_acknowledged_events(dir.str());
  auto wals = wal_files(dir.path);
  REQUIRE(wals.size() == 1);
  faulty_file_system::flip_bit(wals[0], fs::file_size(wals[0]) / 2, 3);

  auto e = open_error(dir.str());
  REQUIRE(e);
  CHECK(e->code() == tp::errc::corrupt_store);
  const std::string what = e->what();
  CHECK_THAT(what, Catch::Contains(dir.str()));
  CHECK_THAT(what, Catch::Contains(wals[0].filename().string()));
  CHECK_THAT(what, Catch::Contains("checksum")); // what RocksDB reported
  // Refused again, and nothing acknowledged was given up meanwhile.
  CHECK(open_error(dir.str())->code() == tp::errc::corrupt_store);
}

TEST_CASE("a flipped bit in a WAL record's length (RocksDB would take it for the tail) refuses to open, and salvage "
          "names the loss") {
  test::temp_dir dir;
  ten_acknowledged_events(dir.str());
  auto wals = wal_files(dir.path);
  REQUIRE(wals.size() == 1);
  // The sixth record's header (the first holds the store's format, the
  // sixth event 5).
  const auto pos = record_offset(wals[0], 5);
  faulty_file_system::flip_bit(wals[0], pos + 5, 7); // its length now runs past the block
  const auto before = snapshot_of(dir.path);

  auto e = open_error(dir.str());
  REQUIRE(e);
  CHECK(e->code() == tp::errc::corrupt_store);
  CHECK_THAT(std::string(e->what()), Catch::Contains("WAL is damaged") &&
                                         Catch::Contains(wals[0].filename().string()) &&
                                         Catch::Contains("followed by 5 intact write(s)"));
  CHECK(snapshot_of(dir.path) == before); // refused before RocksDB touched it

  salvage_names_5_to_10(dir.str());
}

TEST_CASE("a flipped bit in a MANIFEST record's length (RocksDB would take it for the end) refuses to open, salvage "
          "too") {
  test::temp_dir dir;
  ten_acknowledged_events(dir.str());
  // The MANIFEST that CURRENT names: the edits that created the store's
  // column families, in the WAL's record format.
  const auto manifest = current_manifest(dir.path);
  const auto name = manifest.filename().string();
  REQUIRE(fs::exists(manifest));
  const std::string file = contents(manifest);
  std::vector<std::size_t> records;
  for (std::size_t pos = 0; pos + 7 <= file.size() && file[pos + 6] != 0;)
    records.push_back(std::exchange(
        pos, pos + 7 + (std::size_t(std::uint8_t(file[pos + 4])) | std::size_t(std::uint8_t(file[pos + 5])) << 8)));
  // The edits that add the store's column families come last: the third
  // from the end adds the journal. Its length, 128 more, now runs past the
  // end of the file, as if a crash had cut the edit short: RocksDB would
  // open the store without the journal and the edits after it, and
  // create them anew, empty (the events in the WAL ignored, then deleted).
  REQUIRE(records.size() >= 4);
  const auto at = records[records.size() - 3];
  REQUIRE(at + 7 + std::size_t(std::uint8_t(file[at + 4])) + 128 > file.size());
  REQUIRE((std::uint8_t(file[at + 4]) & 0x80) == 0);
  faulty_file_system::flip_bit(manifest, at + 4, 7);
  const auto before = snapshot_of(dir.path);

  auto e = open_error(dir.str());
  REQUIRE(e);
  CHECK(e->code() == tp::errc::corrupt_store);
  CHECK_THAT(std::string(e->what()), Catch::Contains("MANIFEST is damaged") &&
                                         Catch::Contains(name) && Catch::Contains("intact record(s)"));
  CHECK(snapshot_of(dir.path) == before); // refused before RocksDB touched it
  // A salvage mends WALs only: it refuses as well, and changes nothing.
  auto again = open_error(dir.str(), salvaging());
  REQUIRE(again);
  CHECK(again->code() == tp::errc::corrupt_store);
  CHECK(snapshot_of(dir.path) == before);
}

TEST_CASE("a flipped bit in a WAL record's type (RocksDB stops there without a report) refuses to open, and salvage "
          "names the loss") {
  test::temp_dir dir;
  ten_acknowledged_events(dir.str());
  auto wals = wal_files(dir.path);
  REQUIRE(wals.size() == 1);
  const auto pos = record_offset(wals[0], 5); // the sixth record (event 5), as above
  std::ifstream in(wals[0], std::ios::binary);
  in.seekg(static_cast<std::streamoff>(pos + 6));
  REQUIRE(in.get() == 1);                            // a full record...
  in.close();
  faulty_file_system::flip_bit(wals[0], pos + 6, 2); // ...now of a recycled log's type

  auto e = open_error(dir.str());
  REQUIRE(e);
  CHECK(e->code() == tp::errc::corrupt_store);
  CHECK_THAT(std::string(e->what()), Catch::Contains("followed by 5 intact write(s)"));

  salvage_names_5_to_10(dir.str());
}

TEST_CASE("a flipped bit in the last WAL record's length or type (RocksDB takes it for a torn tail) refuses to "
          "open, and salvage names the loss") {
  // The byte of the header and the bit: the length's low byte (128 more),
  // its high byte (32,768 more: both past the end of the file), the type
  // (a full record now of a recycled log's type).
  // Made once, before any section runs RocksDB's threads (a child forked
  // after them may not start threads of its own under ThreadSanitizer).
  static const test::temp_dir& base = made_once([](const std::string& d) { ten_acknowledged_events(d); });
  const auto [byte, bit] = GENERATE(std::pair{4, 7}, std::pair{5, 7}, std::pair{6, 2});
  CAPTURE(byte, bit);
  test::temp_dir dir;
  fs::copy(base.path, dir.path, fs::copy_options::recursive);
  auto wals = wal_files(dir.path);
  REQUIRE(wals.size() == 1);
  const auto pos = record_offset(wals[0], 10); // the eleventh record: event 10, acknowledged, the last
  const std::string file = contents(wals[0]);
  REQUIRE(pos + 7 + (std::size_t(std::uint8_t(file[pos + 4])) | std::size_t(std::uint8_t(file[pos + 5])) << 8) ==
          file.size());
  REQUIRE(file[pos + 6] == 1);
  faulty_file_system::flip_bit(wals[0], pos + static_cast<std::size_t>(byte), bit);
  const auto before = snapshot_of(dir.path);

  auto e = open_error(dir.str());
  REQUIRE(e); // not opened with event 10 silently dropped, and 10 handed out again
  CHECK(e->code() == tp::errc::corrupt_store);
  CHECK_THAT(std::string(e->what()), Catch::Contains("WAL is damaged") &&
                                         Catch::Contains("at byte " + std::to_string(pos)) &&
                                         Catch::Contains("no crash's torn tail"));
  CHECK(snapshot_of(dir.path) == before);

  tp::rocksdb_store s(dir.str(), salvaging());
  const auto report = report_of(s);
  INFO(report);
  CHECK_THAT(report, Catch::Contains("events 10 to 10 of p dropped"));
  CHECK(s.highest_sequence_nr("p") == 10);
  CHECK(s.write("p", one(10, "replacement")) == tp::errc::sequence_mismatch);
}

TEST_CASE("a flipped bit in the last MANIFEST record's length (RocksDB takes it for a torn tail) refuses to open, "
          "salvage too") {
  test::temp_dir dir;
  ten_acknowledged_events(dir.str());
  const auto manifest = current_manifest(dir.path);
  const auto name = manifest.filename().string();
  const std::string file = contents(manifest);
  const auto last = last_record_offset(manifest);
  REQUIRE(last > 0);
  REQUIRE((std::uint8_t(file[last + 5]) & 0x80) == 0);
  faulty_file_system::flip_bit(manifest, last + 5, 7); // its length 32,768 more: past the end, like a tear
  const auto before = snapshot_of(dir.path);

  for (bool salvage : {false, true}) {
    tp::rocksdb_options o;
    o.salvage = salvage;
    auto e = open_error(dir.str(), o);
    REQUIRE(e); // not opened without the last edit
    CHECK(e->code() == tp::errc::corrupt_store);
    CHECK_THAT(std::string(e->what()), Catch::Contains("MANIFEST is damaged") && Catch::Contains(name) &&
                                           Catch::Contains("no crash's torn tail"));
    CHECK(snapshot_of(dir.path) == before);
  }
}

TEST_CASE("salvage names what it dropped from a WAL that is not the newest (RocksDB reads the next one on)") {
  test::temp_dir dir;
  two_wals(dir.str(), [](tp::rocksdb_store&) {}, [](tp::rocksdb_store& s) {
    for (tp::sequence_nr i = 1; i <= 3; ++i) REQUIRE_FALSE(s.write("q", one(i)));
  });
  auto wals = wal_files(dir.path);
  REQUIRE(wals.size() == 2);
  // Event 6's record, the first WAL's last, now of a recycled log's type:
  // RocksDB ends that file there without a report and goes on with the next.
  const auto pos = last_record_offset(wals[0]);
  faulty_file_system::flip_bit(wals[0], pos + 6, 2);

  auto e = open_error(dir.str());
  REQUIRE(e);
  CHECK(e->code() == tp::errc::corrupt_store);
  CHECK_THAT(std::string(e->what()), Catch::Contains(wals[0].filename().string()));
  {
    tp::rocksdb_store s(dir.str(), salvaging());
    const auto report = report_of(s);
    INFO(report);
    CHECK_THAT(report, Catch::Contains("events 6 to 6 of p dropped"));
    CHECK(s.highest_sequence_nr("p") == 6);
    CHECK(s.highest_sequence_nr("q") == 3);
    CHECK(s.write("p", one(6, "replacement")) == tp::errc::sequence_mismatch);
  }
  tp::rocksdb_store again(dir.str()); // an ordinary open: the damaged WAL is gone
  CHECK(again.highest_sequence_nr("p") == 6);
  CHECK(again.highest_sequence_nr("q") == 3);
}

TEST_CASE("salvage marks events dropped from an older WAL below ones a newer WAL kept, and counts no record a "
          "table file holds") {
  // Also with event 5's write damaged in its data (two bits): its number is
  // not taken from it, and the records must still cover every number in
  // turn.
  const bool second = GENERATE(false, true);
  CAPTURE(second);
  test::temp_dir dir;
  // A snapshot of p in the first WAL after its events, events 7 and 8 of p
  // in the second.
  two_wals(dir.str(), [](tp::rocksdb_store& s) { REQUIRE_FALSE(s.save_snapshot("p", empty_snapshot())); },
           [](tp::rocksdb_store& s) {
             for (tp::sequence_nr i = 7; i <= 8; ++i) REQUIRE_FALSE(s.write("p", one(i)));
           });
  auto wals = wal_files(dir.path);
  REQUIRE(wals.size() == 2);
  // Event 3's record (after the format's and z's) now of a recycled log's
  // type: RocksDB takes it for an old log's record (its first four bytes,
  // the write's number 5, are not this log's number 4), ends the file there
  // without a report and reads the next one.
  const auto pos = record_offset(wals[0], 4);
  {
    const std::string file = contents(wals[0]);
    REQUIRE(file.find(std::string(200, 'd'), pos) < pos + 300); // event 3's payload
  }
  faulty_file_system::flip_bit(wals[0], pos + 6, 2);
  if (second) { // two bits: one alone would be found and set right
    faulty_file_system::flip_bit(wals[0], record_offset(wals[0], 6) + 40, 1);
    faulty_file_system::flip_bit(wals[0], record_offset(wals[0], 6) + 41, 6);
  }
  REQUIRE(open_error(dir.str()));
  {
    tp::rocksdb_store s(dir.str(), salvaging());
    const auto report = report_of(s);
    INFO(report);
    CHECK_THAT(report, Catch::Contains("events 3 to 6 of p dropped"));
    CHECK_THAT(report, !Catch::Contains("snapshots")); // p's snapshot is in a table file
  }
  tp::rocksdb_store again(dir.str());
  // A damaged write's key count is also kept above every ID's highest (its
  // keys are not trusted to name the ID): 9 with the second damage.
  CHECK(again.highest_sequence_nr("p") == (second ? 9 : 8));
  std::optional<tp::snapshot_record> snapshot;
  CHECK_FALSE(again.load_snapshot("p", tp::snapshot_criteria{}, snapshot));
  CHECK(snapshot.has_value());
  std::vector<tp::sequence_nr> seen;
  std::vector<std::string> lost;
  REQUIRE_FALSE(again.replay("p", 1, tp::max_sequence_nr, UINT64_MAX, [&](const tp::event_record& e) {
    seen.push_back(e.seq);
    if (e.manifest == tp::events_lost_manifest) lost.push_back(e.payload);
  }));
  CHECK(recovers_whole(again, "p"));
  // 3 to 6 passed over by the record at 6 (event 5's number, not taken from
  // its damaged write, covered too: up to the next event the store has),
  // and 9 with the second damage.
  const std::vector<tp::sequence_nr> expected{1, 2, 6, 7, 8};
  CHECK(seen == (second ? std::vector<tp::sequence_nr>{1, 2, 6, 7, 8, 9} : expected));
  REQUIRE_FALSE(lost.empty());
  CHECK(lost.front() == R"({"from":3,"to":6})");
}

TEST_CASE("salvage keeps a deletion's watermark that only a damaged WAL held, and covers a damaged write between "
          "a dropped run and kept events") {
  SECTION("a deletion whose events' removal reached a table file, but not its watermark") {
    test::temp_dir dir;
    {
      tp::rocksdb_store s(dir.str());
      for (tp::sequence_nr i = 1; i <= 10; ++i) REQUIRE_FALSE(s.write("p", one(i)));
      REQUIRE_FALSE(s.delete_up_to("p", 10));
      flush(s, s.journal_cf()); // the journal alone: the watermark stays in the WAL
    }
    auto wals = wal_files(dir.path);
    REQUIRE_FALSE(wals.empty());
    faulty_file_system::flip_bit(wals[0], last_record_offset(wals[0]) + 6, 2); // the deletion's write
    REQUIRE(open_error(dir.str()));
    tp::rocksdb_store s(dir.str(), salvaging());
    INFO(report_of(s));
    CHECK_THAT(report_of(s), Catch::Contains("deletion of events up to 10 of p dropped"));
    CHECK(s.highest_sequence_nr("p") == 10);
    CHECK(s.write("p", one(1, "again")) == tp::errc::sequence_mismatch);
  }
  SECTION("events 4 (a recycled type) and 5 (two bits of its data) of the older WAL, 6 and 7 in the newer") {
    test::temp_dir dir;
    two_wals(dir.str(), [](tp::rocksdb_store&) {}, [](tp::rocksdb_store& s) {
      for (tp::sequence_nr i = 7; i <= 8; ++i) REQUIRE_FALSE(s.write("p", one(i)));
    });
    auto wals = wal_files(dir.path);
    REQUIRE(wals.size() == 2);
    // Records: the format, z's snapshot, then p's events: event 4 is
    // record 5 (its batch number 6 is not the log's number 4: silent).
    faulty_file_system::flip_bit(wals[0], record_offset(wals[0], 5) + 6, 2);
    faulty_file_system::flip_bit(wals[0], record_offset(wals[0], 6) + 40, 1);
    faulty_file_system::flip_bit(wals[0], record_offset(wals[0], 6) + 60, 3);
    REQUIRE(open_error(dir.str()));
    {
      tp::rocksdb_store s(dir.str(), salvaging());
      INFO(report_of(s));
      CHECK_THAT(report_of(s), Catch::Contains("events 4 to 6 of p dropped"));
    }
    tp::rocksdb_store again(dir.str());
    CHECK(recovers_whole(again, "p"));
    CHECK(again.highest_sequence_nr("p") >= 8);
  }
}

TEST_CASE("a salvage that fails at any of its first WAL writes never leaves a store that hands out a dropped "
          "number") {
  test::temp_dir base;
  ten_acknowledged_events(base.str());
  auto wals = wal_files(base.path);
  REQUIRE(wals.size() == 1);
  // A flipped bit in event 6's data: RocksDB recovers events 1 to 5.
  faulty_file_system::flip_bit(wals[0], record_offset(wals[0], 6) + 30, 3);
  // The salvage's own writes to the new WAL (RocksDB's at the open, the
  // markers, the format's) fail in turn: a crash at that point would leave
  // the store as the failure does.
  for (int skip = 0; skip < 10; ++skip) {
    CAPTURE(skip);
    test::temp_dir dir;
    fs::copy(base.path, dir.path, fs::copy_options::recursive);
    {
      auto faults = std::make_shared<faulty_file_system>();
      faults->fail_next(faulty_file_system::io_op::write, faulty_file_system::fault::io_error, 1, ".log", skip);
      auto o = salvaging();
      o.file_system = faults;
      try {
        tp::rocksdb_store s(dir.str(), o);
      } catch (const troupe::error&) {
      }
    }
    // Refused again (the damaged WAL is still there), then salvaged; or
    // every number kept.
    tp::rocksdb_options o;
    if (auto e = open_error(dir.str())) {
      CHECK(e->code() == tp::errc::corrupt_store);
      o.salvage = true;
    }
    tp::rocksdb_store s(dir.str(), o);
    INFO(report_of(s));
    if (o.salvage) CHECK_THAT(report_of(s), Catch::Contains("events 6 to 10 of p dropped")); // by one or the other
    CHECK(s.highest_sequence_nr("p") >= 10);
    CHECK(s.write("p", one(6, "replacement")) == tp::errc::sequence_mismatch);
    CHECK(recovers_whole(s, "p"));
  }
}

TEST_CASE("salvage reads WAL files in the order of their numbers, also past six digits") {
  test::temp_dir base, dir;
  ten_acknowledged_events(base.str());
  auto wals = wal_files(base.path);
  REQUIRE(wals.size() == 1);
  fs::create_directories(dir.path);
  // The older file holds two writes, the newer all eleven.
  fs::copy_file(wals[0], dir.path / "999999.log");
  fs::resize_file(dir.path / "999999.log", record_offset(wals[0], 2));
  fs::copy_file(wals[0], dir.path / "1000000.log");
  const auto read = troupe::persistence::detail::read_wal_files(dir.str());
  REQUIRE(read.writes.size() == 13);
  CHECK(read.writes[2].offset == 0); // the newer file's first write comes third
  CHECK(read.writes[2].sequence == read.writes[0].sequence);
}

TEST_CASE("after a salvage the store opens as an ordinary one, also when nothing before the damage was kept") {
  // A WAL whose first record is damaged: of ten events, or of a store that
  // a crash ended right after its first open (the WAL holds only the
  // store's format, and nothing needs a flush afterwards).
  // Made once, before any section runs RocksDB's threads (see above).
  static const test::temp_dir& with_events = made_once([](const std::string& d) { ten_acknowledged_events(d); });
  static const test::temp_dir& format_only =
      made_once([](const std::string& d) { in_child_then_die([&] { tp::rocksdb_store s(d); }); });
  const bool events = GENERATE(true, false);
  CAPTURE(events);
  test::temp_dir dir;
  fs::copy((events ? with_events : format_only).path, dir.path, fs::copy_options::recursive);
  auto wals = wal_files(dir.path);
  REQUIRE(wals.size() == 1);
  REQUIRE(fs::file_size(wals[0]) > 7);
  // The first record's length, 128 more: RocksDB keeps nothing of this WAL.
  faulty_file_system::flip_bit(wals[0], 4, 7);
  REQUIRE(open_error(dir.str()));
  const tp::sequence_nr highest = events ? 10 : 0;
  {
    tp::rocksdb_store s(dir.str(), salvaging());
    INFO(report_of(s));
    CHECK(s.highest_sequence_nr("p") == highest);
  }
  auto e = open_error(dir.str());
  CHECK_FALSE(e);
  if (e) FAIL(e->what());
  tp::rocksdb_store again(dir.str());
  CHECK(again.highest_sequence_nr("p") == highest);
  CHECK(again.write("p", one(highest + 1)) == std::error_code());
}

TEST_CASE("a crash's torn tail is never taken for damage: the last record cut anywhere opens") {
  test::temp_dir base;
  ten_acknowledged_events(base.str());
  auto wals = wal_files(base.path);
  REQUIRE(wals.size() == 1);
  const auto pos = record_offset(wals[0], 10);
  const auto size = fs::file_size(wals[0]);
  // Cut inside the header, right after it, and at every 16th byte of the
  // data, as a crash while appending it leaves it (each cut in a copy).
  for (auto cut = pos + 3; cut < size; cut += cut < pos + 8 ? 4 : 16) {
    CAPTURE(cut);
    test::temp_dir dir;
    fs::copy(base.path, dir.path, fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    fs::resize_file(dir.path / wals[0].filename(), cut);
    tp::rocksdb_store s(dir.str());
    CHECK(s.highest_sequence_nr("p") == 9);
  }
}

TEST_CASE("salvage reads a write whose one flipped bit is in its ID as it was written, even as the WAL's only "
          "write") {
  test::temp_dir dir;
  // Events of q flushed; the WAL then holds one write: event 1 of p.
  {
    tp::rocksdb_store s(dir.str());
    for (tp::sequence_nr i = 1; i <= 9; ++i) REQUIRE_FALSE(s.write("q", one(i)));
    flush(s, s.db().DefaultColumnFamily());
    flush(s, s.journal_cf());
    flush(s, s.meta_cf());
    REQUIRE_FALSE(s.write("p", one(1)));
  }
  auto wals = wal_files(dir.path);
  REQUIRE_FALSE(wals.empty());
  const auto wal = wals.back();
  const auto pos = last_record_offset(wal);
  const std::string file = contents(wal);
  const auto key = troupe::persistence::detail::seq_key(troupe::persistence::detail::id_prefix("p"), 1);
  const auto at = file.find(key, pos);
  REQUIRE(at != std::string::npos);
  faulty_file_system::flip_bit(wal, at + key.size() - 9, 5); // "p" becomes "P"
  REQUIRE(open_error(dir.str()));

  tp::rocksdb_store s(dir.str(), salvaging());
  const auto report = report_of(s);
  INFO(report);
  CHECK_THAT(report, Catch::Contains("events 1 to 1 of p dropped"));
  CHECK_THAT(report, !Catch::Contains(" of P "));
  CHECK(s.highest_sequence_nr("p") == 1);
  CHECK(s.write("p", one(1, "replacement")) == tp::errc::sequence_mismatch);
  CHECK(s.highest_sequence_nr("q") == 9);
}

TEST_CASE("salvage takes no event number from a damaged write's keys (a flipped bit in one made it 2^63 + 5)") {
  test::temp_dir dir;
  ten_acknowledged_events(dir.str());
  auto wals = wal_files(dir.path);
  REQUIRE(wals.size() == 1);
  // The journal key of event 5: the ID, then its number in 8 big-endian bytes.
  const std::string wal = contents(wals[0]);
  const std::string key_end = std::string("p") + std::string(7, '\0') + '\5';
  const auto at = wal.find(key_end);
  REQUIRE(at != std::string::npos);
  faulty_file_system::flip_bit(wals[0], at + 1, 7); // the number's highest bit: the write still decodes
  REQUIRE(open_error(dir.str())->code() == tp::errc::corrupt_store);

  salvage_names_5_to_10(dir.str()); // 10, not 2^63 + 5
  tp::rocksdb_store s(dir.str());
  CHECK(!s.write("p", one(11)));
}

TEST_CASE("salvage keeps the numbers of an ID named only by a damaged write") {
  test::temp_dir dir;
  in_child_then_die([&] {
    tp::rocksdb_store s(dir.str());
    for (tp::sequence_nr i = 1; i <= 5; ++i)
      if (s.write("p", one(i, std::string(200, 'p')))) throw 1;
    if (s.write("q", one(1, std::string(200, 'Q')))) throw 2; // q's only event
    for (tp::sequence_nr i = 6; i <= 10; ++i)
      if (s.write("p", one(i, std::string(200, 'p')))) throw 3;
  });
  auto wals = wal_files(dir.path);
  REQUIRE(wals.size() == 1);
  const std::string wal = contents(wals[0]);
  const auto at = wal.find(std::string(200, 'Q'));
  REQUIRE(at != std::string::npos);
  faulty_file_system::flip_bit(wals[0], at + 100, 0); // inside q's payload: the write still decodes

  tp::rocksdb_store s(dir.str(), salvaging());
  const auto report = report_of(s);
  INFO(report);
  CHECK_THAT(report, Catch::Contains(" of q dropped"));
  CHECK(s.highest_sequence_nr("q") >= 1);
  CHECK(s.write("q", one(1, "replacement")) == tp::errc::sequence_mismatch); // never handed out again
  CHECK(s.highest_sequence_nr("p") == 10);
}

TEST_CASE("salvage does not take a deletion of every event for events up to the largest number") {
  test::temp_dir dir;
  in_child_then_die([&] {
    tp::rocksdb_store s(dir.str());
    for (tp::sequence_nr i = 1; i <= 5; ++i)
      if (s.write("p", one(i, std::string(200, 'x')))) throw 1;
    if (s.delete_up_to("p", tp::max_sequence_nr)) throw 2;
    for (tp::sequence_nr i = 6; i <= 7; ++i)
      if (s.write("p", one(i, std::string(200, 'y')))) throw 3;
  });
  auto wals = wal_files(dir.path);
  REQUIRE(wals.size() == 1);
  faulty_file_system::flip_bit(wals[0], fs::file_size(wals[0]) - 150, 3); // inside event 7
  tp::rocksdb_store s(dir.str(), salvaging());
  const auto report = report_of(s);
  INFO(report);
  CHECK_THAT(report, !Catch::Contains("18446744073709551615"));
  CHECK(s.highest_sequence_nr("p") == 7);
  CHECK(s.write("p", one(0)) == tp::errc::sequence_mismatch);
  CHECK(!s.write("p", one(8)));
}

TEST_CASE("no number follows the largest: a write after it is sequence_mismatch, never number 0 or 1 again") {
  test::temp_dir dir;
  {
    tp::rocksdb_store s(dir.str());
    REQUIRE(!s.write("p", one(1)));
    // An event at the largest number (where a salvage's marker may stand).
    auto big = one(tp::max_sequence_nr);
    REQUIRE(s.db()
                .Put(rocksdb::WriteOptions{}, s.journal_cf(),
                     tp::detail::seq_key(tp::detail::id_prefix("p"), tp::max_sequence_nr),
                     tp::detail::encode_event(big[0]))
                .ok());
  }
  tp::rocksdb_store s(dir.str());
  CHECK(s.highest_sequence_nr("p") == tp::max_sequence_nr);
  CHECK(s.write("p", one(0)) == tp::errc::sequence_mismatch);
  CHECK(s.write("p", one(1, "replacement")) == tp::errc::sequence_mismatch);
  std::vector<std::string> payloads;
  REQUIRE(!s.replay("p", 0, 1, 10, [&](const tp::event_record& e) { payloads.push_back(e.payload); }));
  CHECK(payloads == std::vector<std::string>{"payload"});
}

TEST_CASE("a deletion in the same group commit as events it covers keeps their highest number") {
  test::temp_dir dir;
  {
    tp::rocksdb_store s(dir.str(), tp::rocksdb_options{.durability = tp::durability::none});
    REQUIRE(!s.write("x", {one(1)[0], one(2)[0], one(3)[0]}));
    for (int round = 0; round < 50; ++round) {
      // Keep the writer busy, so that the next requests share a group.
      std::vector<std::future<std::error_code>> busy;
      for (int i = 0; i < 20; ++i) {
        auto p = std::make_shared<std::promise<std::error_code>>();
        busy.push_back(p->get_future());
        s.submit("busy-" + std::to_string(round) + "-" + std::to_string(i), one(1), {},
                 [p](std::error_code ec) { p->set_value(ec); });
      }
      const auto next = s.highest_sequence_nr("x") + 1;
      auto written = std::make_shared<std::promise<std::error_code>>();
      auto f = written->get_future();
      s.submit("x", {one(next)[0], one(next + 1)[0]}, {}, [written](std::error_code ec) { written->set_value(ec); });
      REQUIRE(!s.delete_up_to("x", tp::max_sequence_nr));
      REQUIRE(!f.get());
      for (auto& b : busy) REQUIRE(!b.get());
      REQUIRE(s.highest_sequence_nr("x") == next + 1);
    }
  }
  tp::rocksdb_store s(dir.str());
  CHECK(s.highest_sequence_nr("x") == 3 + 100);
  CHECK(s.write("x", one(4)) == tp::errc::sequence_mismatch);
}

TEST_CASE("an incomplete record at the tail of the WAL (a crash while writing it) is tolerated") {
  test::temp_dir dir;
  ten_acknowledged_events(dir.str());
  auto wals = wal_files(dir.path);
  REQUIRE(wals.size() == 1);
  fs::resize_file(wals[0], fs::file_size(wals[0]) - 20);

  tp::rocksdb_store s(dir.str());
  CHECK(s.highest_sequence_nr("p") == 9);
}

TEST_CASE("a store of a newer format is refused with store_format_too_new and left byte for byte unchanged") {
  test::temp_dir dir;
  {
    tp::rocksdb_store s(dir.str());
    (void)s.open_table("timers");
    REQUIRE(!s.write("p", one(1)));
  }
  // What a newer troupe would have left: a higher format, written last.
  {
    rocksdb::Options o;
    std::vector<std::string> names;
    REQUIRE(rocksdb::DB::ListColumnFamilies(o, dir.str(), &names).ok());
    std::vector<rocksdb::ColumnFamilyDescriptor> cfs;
    for (auto& n : names) cfs.emplace_back(n, rocksdb::ColumnFamilyOptions{});
    std::vector<rocksdb::ColumnFamilyHandle*> handles;
    rocksdb::DB* db = nullptr;
    REQUIRE(rocksdb::DB::Open(o, dir.str(), cfs, &handles, &db).ok());
    auto meta = std::find(names.begin(), names.end(), "meta") - names.begin();
    REQUIRE(db->Put(rocksdb::WriteOptions{}, handles[meta], "format", u32_be(tp::rocksdb_store::format_version + 1))
                .ok());
    REQUIRE(db->Put(rocksdb::WriteOptions{}, handles[0], "newer", "data").ok()); // left in the WAL
    for (auto* h : handles) db->DestroyColumnFamilyHandle(h);
    REQUIRE(db->Close().ok());
    delete db;
  }
  std::ofstream(dir.path / "troupe-format", std::ios::trunc) << tp::rocksdb_store::format_version + 1 << "\n";
  const auto before = snapshot_of(dir.path);

  auto e = open_error(dir.str());
  REQUIRE(e);
  CHECK(e->code() == tp::errc::store_format_too_new);
  CHECK_THAT(std::string(e->what()), Catch::Contains(dir.str()));
  CHECK(snapshot_of(dir.path) == before);
}

TEST_CASE("a store written before the format file existed has it written at its first open") {
  test::temp_dir dir;
  { tp::rocksdb_store s(dir.str()); }
  fs::remove(dir.path / "troupe-format");
  { tp::rocksdb_store s(dir.str()); }
  std::ifstream in(dir.path / "troupe-format");
  int v = 0;
  in >> v;
  CHECK(v == static_cast<int>(tp::rocksdb_store::format_version));
}

TEST_CASE("a path that merely contains 'lock' is not reported as a locked store") {
  test::temp_dir dir;
  fs::create_directories(dir.path);
  std::ofstream(dir.path / "blocks") << "a file, not a directory";
  auto e = open_error((dir.path / "blocks" / "store").string());
  REQUIRE(e);
  CHECK(e->code() == tp::errc::storage_failure);
  CHECK_THAT(std::string(e->what()), Catch::Contains("blocks"));
}

TEST_CASE("a store open in another process is locked, naming it") {
  test::temp_dir dir;
  int ready[2], done[2];
  REQUIRE(pipe(ready) == 0);
  REQUIRE(pipe(done) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    {
      tp::rocksdb_store s(dir.str());
      char c = 1;
      (void)!write(ready[1], &c, 1);
      (void)!read(done[0], &c, 1);
    }
    _exit(0);
  }
  char c = 0;
  REQUIRE(read(ready[0], &c, 1) == 1);
  auto e = open_error(dir.str());
  c = 1;
  (void)!write(done[1], &c, 1);
  int status = 0;
  waitpid(child, &status, 0);
  REQUIRE(e);
  CHECK(e->code() == tp::errc::store_locked);
  CHECK_THAT(std::string(e->what()), Catch::Contains(std::to_string(child)));
}

TEST_CASE("a flipped bit in a table file's properties block (RocksDB asserts on it before its checksum) refuses to "
          "open") {
  test::temp_dir dir;
  {
    tp::rocksdb_store s(dir.str());
    for (tp::sequence_nr i = 1; i <= 10; ++i) REQUIRE_FALSE(s.write("p", one(i)));
    flush(s, s.journal_cf());
  }
  std::vector<fs::path> tables;
  for (auto& e : fs::directory_iterator(dir.path))
    if (e.path().extension() == ".sst") tables.push_back(e.path());
  REQUIRE(tables.size() == 1);
  REQUIRE(troupe::persistence::detail::table_file_damage(tables[0].string()).empty());
  // The properties block's handle, from the metaindex block that the
  // footer names (the same reading as the check's, done here by hand: the
  // metaindex's entry for "rocksdb.properties" ends with its handle).
  const std::string file = contents(tables[0]);
  const auto at = file.rfind("rocksdb.properties");
  REQUIRE(at != std::string::npos);
  std::size_t pos = at + std::string_view("rocksdb.properties").size();
  auto varint = [&] {
    std::uint64_t v = 0;
    for (int shift = 0;; shift += 7) {
      const auto b = std::uint8_t(file[pos++]);
      v |= std::uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
  };
  const auto offset = varint(), size = varint();
  REQUIRE(offset + size <= file.size());
  // Bit 31 of the block's last word: the index type, now a hash index.
  faulty_file_system::flip_bit(tables[0], offset + size - 1, 7);
  CHECK_THAT(troupe::persistence::detail::table_file_damage(tables[0].string()), Catch::Contains("properties block"));
  const auto before = snapshot_of(dir.path);

  // In a child: RocksDB's assertion would end this process.
  in_child_then_die([&] {
    auto e = open_error(dir.str());
    if (!e || e->code() != tp::errc::corrupt_store) throw 1;
    if (std::string(e->what()).find(tables[0].filename().string()) == std::string::npos) throw 2;
  });
  CHECK(snapshot_of(dir.path) == before);
}

TEST_CASE("a flipped byte in a journal table file gives corrupt_record naming the ID, with RocksDB's message") {
  test::temp_dir dir;
  {
    tp::rocksdb_store s(dir.str());
    std::mt19937 rng(1);
    for (tp::sequence_nr i = 1; i <= 200; ++i) {
      std::string payload(100, ' ');
      for (auto& c : payload) c = static_cast<char>('a' + rng() % 26); // incompressible enough
      REQUIRE(!s.write("p", one(i, payload)));
    }
    REQUIRE(s.db().Flush(rocksdb::FlushOptions{}, s.journal_cf()).ok());
  }
  // The journal's table file: the largest .sst (the others are tiny).
  fs::path sst;
  for (auto& e : fs::directory_iterator(dir.path))
    if (e.path().extension() == ".sst" && (sst.empty() || fs::file_size(e.path()) > fs::file_size(sst))) sst = e.path();
  REQUIRE(!sst.empty());
  faulty_file_system::flip_bit(sst, fs::file_size(sst) / 4, 1);

  tp::rocksdb_store s(dir.str());
  std::string what;
  auto ec = s.replay("p", 1, tp::max_sequence_nr, UINT64_MAX, [](const tp::event_record&) {});
  CHECK(ec == tp::errc::corrupt_record);
  CHECK_THAT(s.last_failure(), Catch::Contains("p"));
  CHECK_THAT(s.last_failure(), Catch::Contains("Corruption"));
}

TEST_CASE("injected write errors reach the writer's callers; later writes succeed") {
  test::temp_dir dir;
  auto faults = std::make_shared<faulty_file_system>(7);
  tp::rocksdb_options o;
  o.file_system = faults;
  tp::rocksdb_store s(dir.str(), o);
  REQUIRE(!s.write("p", one(1)));
  faults->fail_next(faulty_file_system::io_op::write, faulty_file_system::fault::io_error, 1, ".log");
  CHECK(s.write("p", one(2)) == tp::errc::storage_failure);
  CHECK_THAT(s.last_failure(), Catch::Contains("injected write fault"));
  CHECK(faults->injected() == 1);
  // The next write succeeds at once (the store reopens itself before it),
  // without a restart, and nothing acknowledged was lost.
  CHECK(!s.write("p", one(s.highest_sequence_nr("p") + 1)));
  CHECK(s.highest_sequence_nr("p") >= 2);
}

TEST_CASE("a full disk (injected) gives storage_full, and writes succeed once space returns") {
  test::temp_dir dir;
  auto faults = std::make_shared<faulty_file_system>(7);
  tp::rocksdb_options o;
  o.file_system = faults;
  tp::rocksdb_store s(dir.str(), o);
  REQUIRE(!s.write("p", one(1)));
  faults->fill_disk();
  CHECK(s.write("p", one(2)) == tp::errc::storage_full);
  CHECK(s.write("p", one(2)) == tp::errc::storage_full); // still full
  faults->clear();
  // The store reopens itself (at most every 50 ms while that fails): the
  // write right after space returned may fail as the one before.
  CHECK(!write_once_recovered(s, "p", 2)); // the disk refused event 2 before: it is written now
  CHECK(!s.write("p", one(3)));
  CHECK(s.highest_sequence_nr("p") == 3);
}

TEST_CASE("a real full disk (a small tmpfs) gives storage_full, the process lives, nothing acknowledged is lost") {
  test::temp_dir dir;
  fs::create_directories(dir.path);
  if (mount("tmpfs", dir.str().c_str(), "tmpfs", 0, "size=24m") != 0) {
    WARN("skipped: cannot mount a tmpfs here (needs root): " << std::strerror(errno));
    return;
  }
  struct unmount {
    std::string p;
    ~unmount() { umount2(p.c_str(), MNT_DETACH); }
  } unmount_at_end{dir.str()};
  const auto store = (dir.path / "store").string();
  const auto filler = dir.path / "filler";
  tp::sequence_nr acknowledged = 0;
  std::error_code failure;
  // Space to give back later; the events fill the rest.
  std::ofstream(filler) << std::string(4 << 20, 'f');
  {
    tp::rocksdb_store s(store);
    const std::string payload(4000, 'p');
    while (acknowledged < 100'000) {
      failure = s.write("p", one(acknowledged + 1, payload));
      if (failure) break;
      ++acknowledged;
    }
    CHECK(failure == tp::errc::storage_full);
    CHECK_THAT(s.last_failure(), Catch::Contains("space"));
    INFO("acknowledged before the disk was full: " << acknowledged);
    CHECK(acknowledged > 100);
    // Space returns: writes succeed again, in the same store object.
    fs::remove(filler);
    CHECK(!write_once_recovered(s, "p", acknowledged + 1, payload));
  }
  tp::rocksdb_store s(store);
  tp::sequence_nr seen = 0;
  REQUIRE(!s.replay("p", 1, tp::max_sequence_nr, UINT64_MAX, [&](const tp::event_record& e) {
    CHECK(e.seq == seen + 1);
    seen = e.seq;
  }));
  CHECK(seen >= acknowledged + 1);
}

TEST_CASE("a store reached through a bind mount is the same store: the second open is refused, and the first keeps "
          "its lock against other processes") {
  test::temp_dir dir;
  const auto a = dir.path / "a", b = dir.path / "b";
  fs::create_directories(a);
  fs::create_directories(b);
  if (mount(a.c_str(), b.c_str(), nullptr, MS_BIND, nullptr) != 0) {
    WARN("skipped: cannot bind-mount here (needs root or CAP_SYS_ADMIN): " << std::strerror(errno));
    return;
  }
  struct unmount {
    std::string p;
    ~unmount() { umount2(p.c_str(), MNT_DETACH); }
  } unmount_at_end{b.string()};
  second_process other(a.string()); // forked before anything is open
  tp::rocksdb_store first(a.string());
  REQUIRE(!first.write("x", one(1)));
  auto e = open_error(b.string()); // the same directory by another path
  REQUIRE(e);
  CHECK(e->code() == tp::errc::store_locked);
  CHECK_THAT(std::string(e->what()), Catch::Contains(a.string()));
  CHECK(other.try_open() == second_process::locked);
  CHECK(!first.write("x", one(2)));
  CHECK(first.highest_sequence_nr("x") == 2);
}

namespace {
/// Forks a child (which lives 800 ms and exits) when the store lock's hook
/// fires at `where`, and waits for the fork up to 100 ms: a fork the lock
/// holds off until its descriptor is registered (or closed) happens later.
struct fork_at_gap {
  static inline std::atomic<int> where{-1}, phase{0};
  static inline std::atomic<pid_t> child{0};
  std::thread forker;
  explicit fork_at_gap(int at) {
    where = at;
    phase = 0;
    child = 0;
    tp::detail::store_lock_test_hook = [](int w) {
      if (w != where.load()) return;
      phase = 1;
      const auto until = std::chrono::steady_clock::now() + 100ms;
      while (phase.load() != 2 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
    };
    forker = std::thread([] {
      while (phase.load() == 0) std::this_thread::sleep_for(1ms);
      const pid_t p = ::fork();
      if (p == 0) {
        ::usleep(800'000);
        ::_exit(0);
      }
      child = p;
      phase = 2;
    });
  }
  ~fork_at_gap() {
    tp::detail::store_lock_test_hook = nullptr;
    if (forker.joinable()) forker.join();
    if (child.load() > 0) {
      int status = 0;
      ::waitpid(child.load(), &status, 0);
    }
  }
};
} // namespace

TEST_CASE("a child forked while a store opens or closes does not keep its directory locked after the store closed") {
  for (const int where : {0, 1}) {
    test::temp_dir dir;
    {
      fork_at_gap f(where);
      { tp::rocksdb_store s(dir.path.string()); } // opened and closed, the fork at the gap
      tp::detail::store_lock_test_hook = nullptr;
      f.forker.join();
      REQUIRE(f.child.load() > 0);
      // The child still lives: the store is this process's to open again.
      INFO((where == 0 ? "forked while opening" : "forked while closing"));
      auto e = open_error(dir.path.string());
      CHECK(!e);
      if (e) UNSCOPED_INFO(e->what());
    }
  }
}

TEST_CASE("a store reached by a second path without a mount (its directory moved, a link left) is the same store") {
  test::temp_dir dir;
  const auto a = dir.path / "a", b = dir.path / "b";
  fs::create_directories(a);
  second_process other(a.string());
  tp::rocksdb_store first(a.string());
  REQUIRE(!first.write("x", one(1)));
  fs::rename(a, b);
  fs::create_directory_symlink(b, a); // the first store's later files go through it
  auto e = open_error(b.string());
  REQUIRE(e);
  CHECK(e->code() == tp::errc::store_locked);
  CHECK(other.try_open() == second_process::locked);
  CHECK(!first.write("x", one(2)));
}

TEST_CASE("a store stays locked against other processes whatever this process opens and closes in its directory") {
  test::temp_dir dir;
  fs::create_directories(dir.path);
  second_process other(dir.str());
  tp::rocksdb_store s(dir.str());
  REQUIRE(!s.write("x", one(1)));
  { std::ifstream lock(dir.path / "LOCK"); } // a close of any descriptor of it drops the process's fcntl locks
  (void)troupe::persistence::detail::lock_holder(dir.str());
  CHECK(other.try_open() == second_process::locked);
  CHECK(!s.write("x", one(2)));
}

TEST_CASE("a store whose reopen failed on a full disk stays locked against other processes") {
  test::temp_dir dir;
  fs::create_directories(dir.path);
  second_process other(dir.str());
  auto faults = std::make_shared<faulty_file_system>(7);
  tp::rocksdb_options o;
  o.file_system = faults;
  tp::rocksdb_store s(dir.str(), o);
  REQUIRE(!s.write("x", one(1)));
  faults->fill_disk();
  CHECK(s.write("x", one(2)) == tp::errc::storage_full); // RocksDB stops
  CHECK(s.write("x", one(2)) == tp::errc::storage_full); // its reopen fails: the database is closed
  CHECK(other.try_open() == second_process::locked);
  faults->clear();
  CHECK(!write_once_recovered(s, "x", 2));
  CHECK(s.highest_sequence_nr("x") == 2);
}

TEST_CASE("after a failed reopen on a full disk, reads say storage_full and bring the store back by themselves") {
  test::temp_dir dir;
  auto faults = std::make_shared<faulty_file_system>(7);
  tp::rocksdb_options o;
  o.file_system = faults;
  tp::rocksdb_store s(dir.str(), o);
  auto t = s.open_table("t");
  REQUIRE(!s.write("p", one(1), {tp::table_write::put(t, "k", "v")}));
  faults->fill_disk();
  CHECK(s.write("p", one(2)) == tp::errc::storage_full); // RocksDB stops
  CHECK(s.write("p", one(2)) == tp::errc::storage_full); // the reopen fails: closed
  std::optional<std::string> v;
  // Every operation fails with storage_full while the disk is full, none with another code.
  std::vector<std::pair<std::string, std::error_code>> codes{
      {"get", s.get(t, "k", v)},
      {"scan", s.scan(t, "", [](std::string_view, std::string_view) { return true; })},
      {"replay", s.replay("p", 1, tp::max_sequence_nr, 10, [](const tp::event_record&) {})},
      {"highest_sequence_nr", code_of([&] { (void)s.highest_sequence_nr("p"); })},
      {"load_snapshot", code_of([&] {
         std::optional<tp::snapshot_record> r;
         return s.load_snapshot("p", {}, r);
       })},
      {"open_table", code_of([&] { (void)s.open_table("another"); })},
      {"write", s.write("p", one(2))},
      {"drop_expired", s.drop_expired(t)},
  };
  for (auto& [op, ec] : codes) {
    INFO(op << ": " << ec.message());
    CHECK(ec == tp::errc::storage_full);
  }
  // Reading only: the reads themselves retry the reopen, at the writes' pace.
  const auto before = faults->injected();
  for (auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(400); std::chrono::steady_clock::now() < end;)
    (void)s.get(t, "k", v);
  const auto faults_seen = faults->injected() - before;
  CHECK(faults_seen >= 1);  // reopens were tried by reads
  CHECK(faults_seen < 200); // and not once per read
  faults->clear();
  const auto batches = s.batches_written();
  CHECK(test::eventually([&] { return !s.get(t, "k", v) && v == "v"; }, std::chrono::seconds(5)));
  CHECK(s.highest_sequence_nr("p") == 1);
  CHECK(s.batches_written() == batches); // no write was needed
}

TEST_CASE("a write stopped behind a background error of no space is storage_full") {
  namespace d = troupe::persistence::detail;
  const auto bg = rocksdb::Status::NoSpace("While appending to file", "000012.sst");
  CHECK(d::write_code(rocksdb::Status::Incomplete(bg.ToString()), true) == tp::errc::storage_full);
  CHECK(d::write_code(rocksdb::Status::Incomplete("stall"), false) == tp::errc::storage_failure);
  CHECK(d::write_code(rocksdb::Status::SpaceLimit(), false) == tp::errc::storage_full);
  CHECK(d::status_code(rocksdb::Status::SpaceLimit()) == tp::errc::storage_full);
  CHECK(d::write_code(rocksdb::Status::IOError("x"), false) == tp::errc::storage_failure);
}

TEST_CASE("on a real full disk (a small tmpfs) a store that only reads comes back by itself once space returns") {
  test::temp_dir dir;
  fs::create_directories(dir.path);
  if (mount("tmpfs", dir.str().c_str(), "tmpfs", 0, "size=24m") != 0) {
    WARN("skipped: cannot mount a tmpfs here (needs root): " << std::strerror(errno));
    return;
  }
  struct unmount {
    std::string p;
    ~unmount() { umount2(p.c_str(), MNT_DETACH); }
  } unmount_at_end{dir.str()};
  const auto filler = dir.path / "filler";
  std::ofstream(filler) << std::string(4 << 20, 'f');
  tp::rocksdb_store s((dir.path / "store").string());
  const std::string payload(4000, 'p');
  tp::sequence_nr acknowledged = 0;
  std::error_code failure;
  while (acknowledged < 100'000 && !(failure = s.write("p", one(acknowledged + 1, payload)))) ++acknowledged;
  REQUIRE(failure == tp::errc::storage_full);
  // Every byte left taken too: the store's reopen cannot write its files.
  {
    const auto tight = dir.path / "tight";
    const int fd = ::open(tight.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    REQUIRE(fd >= 0);
    const std::string block(4096, 't');
    while (::write(fd, block.data(), block.size()) > 0) {
    }
    while (::write(fd, block.data(), 1) > 0) {
    }
    ::close(fd);
  }
  // Writes and reads go on; whatever fails says storage_full (reads fail
  // too while a reopen failed and left the store closed).
  std::error_code read_code;
  for (int i = 0; i < 50; ++i) {
    const auto wec = s.write("p", one(acknowledged + 1, payload));
    if (!wec) ++acknowledged; // (a reopen may make room for one)
    CHECK((!wec || wec == tp::errc::storage_full));
    const auto rec = code_of([&] { (void)s.highest_sequence_nr("p"); });
    CHECK((!rec || rec == tp::errc::storage_full));
    if (rec) read_code = rec;
    std::this_thread::sleep_for(std::chrono::milliseconds(20)); // across the reopen's backoff
  }
  if (!read_code) WARN("the store's reopens did not fail on this tmpfs: reads were never refused");
  fs::remove(filler);
  fs::remove(dir.path / "tight");
  // From here on nothing writes.
  tp::sequence_nr highest = 0;
  CHECK(test::eventually([&] { return !code_of([&] { highest = s.highest_sequence_nr("p"); }); },
                         std::chrono::seconds(10)));
  CHECK(highest >= acknowledged);
  tp::sequence_nr seen = 0;
  CHECK(!s.replay("p", 1, tp::max_sequence_nr, UINT64_MAX, [&](const tp::event_record& e) { seen = e.seq; }));
  CHECK(seen >= acknowledged);
}

TEST_CASE("salvage opens a store with a damaged WAL, names what it dropped, and never hands out a dropped number "
          "again") {
  test::temp_dir dir;
  ten_acknowledged_events(dir.str());
  auto wals = wal_files(dir.path);
  REQUIRE(wals.size() == 1);
  faulty_file_system::flip_bit(wals[0], fs::file_size(wals[0]) / 2, 3);
  REQUIRE(open_error(dir.str())->code() == tp::errc::corrupt_store);

  tp::sequence_nr kept = 0;
  {
    tp::rocksdb_store s(dir.str(), salvaging());
    REQUIRE(!s.salvaged().empty());
    const auto report = report_of(s);
    INFO(report);
    CHECK_THAT(report, Catch::Contains("checksum"));
    CHECK_THAT(report, Catch::Contains(" to 10 of p dropped"));
    // The events before the damage are there; the dropped numbers are kept.
    std::vector<tp::event_record> seen;
    REQUIRE(!s.replay("p", 1, tp::max_sequence_nr, UINT64_MAX, [&](const tp::event_record& e) { seen.push_back(e); }));
    REQUIRE(seen.size() >= 2);
    kept = seen[seen.size() - 2].seq;
    CHECK(kept < 10);
    for (std::size_t i = 0; i + 1 < seen.size(); ++i) CHECK(seen[i].seq == i + 1);
    CHECK(seen.back().seq == 10);
    CHECK(seen.back().manifest == tp::events_lost_manifest);
    CHECK(s.highest_sequence_nr("p") == 10);
    CHECK(s.write("p", one(kept + 1)) == tp::errc::sequence_mismatch);
    CHECK(!s.write("p", one(11)));
  }
  // The damage is gone: an ordinary open, and nothing salvaged any more.
  tp::rocksdb_store s(dir.str());
  CHECK(s.salvaged().empty());
  CHECK(s.highest_sequence_nr("p") == 11);
}

TEST_CASE("salvage of an undamaged store changes nothing") {
  test::temp_dir dir;
  ten_acknowledged_events(dir.str());
  tp::rocksdb_store s(dir.str(), salvaging());
  CHECK(s.salvaged().empty());
  CHECK(s.highest_sequence_nr("p") == 10);
}

} // namespace persistence_store_faults_test
