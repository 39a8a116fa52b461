// troupe_bench_wal_replay: RocksDB alone writing the records a run of the
// order stream wrote, against the stream's raw measurement, on the same
// machine in one run (docs/performance.md, "RocksDB alone with the
// stream's records").
//
//   troupe_orders bench --orders N --dir D --keep-wal W
//   troupe_bench_wal_replay --wal W --wal D/troupe --dir R [--repeat K]
//
// reads the writes of every WAL file in the --wal directories (in the order
// of their numbers: the run's writes as RocksDB received them), then K
// rounds, each into fresh databases with RocksDB's default options:
//   raw      the stream's raw measurement: synchronous batches of 1,000
//            puts of 100 bytes, keys ascending ('k' and a counter), one
//            column family;
//   groups   the run's writes, one synchronous write each, as the store's
//            writer made them (its group commits), into the run's column
//            families (created in the order of their IDs);
//   batches  the same records in synchronous batches of 1,000.
// Each as records per second and CPU microseconds per record on the
// writing thread; a JSON line per round and a summary with the medians.
#include "bench_common.hpp"

#include <troupe/persistence/json.hpp>

#include <rocksdb/db.h>
#include <rocksdb/write_batch.h>

#include <boost/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

namespace fs = std::filesystem;

namespace {

struct rate {
  double records_per_second = 0;
  double cpu_us_per_record = 0;
};

double thread_cpu_seconds() {
  timespec t{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

/// The logical records (write batches) of one WAL file: RocksDB's log
/// format, blocks of 32 KiB, each physical record a 7-byte header (CRC,
/// length, type: 1 full, 2 first, 3 middle, 4 last) and its data. The files
/// of a finished run are whole; the checksums are not checked again.
std::vector<std::string> wal_batches(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  constexpr std::size_t block = 32768, header = 7;
  std::vector<std::string> out;
  std::string pending;
  for (std::size_t at = 0; at + header <= data.size();) {
    if (block - at % block < header) { // a block's tail: padding
      at += block - at % block;
      continue;
    }
    const std::size_t length =
        std::size_t(std::uint8_t(data[at + 4])) | std::size_t(std::uint8_t(data[at + 5])) << 8;
    const int type = std::uint8_t(data[at + 6]);
    if (type == 0) break; // zeroes: the end of what was written (a preallocated tail)
    bench::check(type >= 1 && type <= 4 && at + header + length <= data.size(), "a WAL record of the log format");
    const std::string_view body(data.data() + at + header, length);
    if (type == 1 || type == 2) pending.assign(body);
    if (type == 3 || type == 4) pending.append(body);
    if (type == 1 || type == 4) out.push_back(std::move(pending));
    at += header + length;
  }
  return out;
}

/// A fresh database with column families 1..`families` besides the
/// default one (RocksDB numbers them in the order they are created).
struct fresh_db {
  fresh_db(const fs::path& dir, std::uint32_t families) : path(dir) {
    fs::remove_all(dir);
    fs::create_directories(dir);
    rocksdb::Options o;
    o.create_if_missing = true;
    rocksdb::DB* raw = nullptr;
    bench::check(rocksdb::DB::Open(o, dir.string(), &raw).ok(), "the replay's database opens");
    db.reset(raw);
    cfs.push_back(db->DefaultColumnFamily());
    for (std::uint32_t id = 1; id <= families; ++id) {
      rocksdb::ColumnFamilyHandle* h = nullptr;
      bench::check(db->CreateColumnFamily(rocksdb::ColumnFamilyOptions(), "cf" + std::to_string(id), &h).ok(),
                   "a column family is created");
      bench::check(h->GetID() == id, "column families numbered in the order created");
      cfs.push_back(h);
    }
  }
  ~fresh_db() {
    for (std::size_t i = 1; i < cfs.size(); ++i) db->DestroyColumnFamilyHandle(cfs[i]);
    db.reset();
    fs::remove_all(path);
  }
  fs::path path;
  std::unique_ptr<rocksdb::DB> db;
  std::vector<rocksdb::ColumnFamilyHandle*> cfs;
};

/// Copies every operation of a batch into another, by column family ID.
struct copier : rocksdb::WriteBatch::Handler {
  std::vector<rocksdb::ColumnFamilyHandle*>* cfs = nullptr;
  rocksdb::WriteBatch* out = nullptr;
  std::uint32_t highest_id = 0;
  bool counting = false; // only note the highest column family ID

  rocksdb::Status to(std::uint32_t id, auto&& op) {
    highest_id = std::max(highest_id, id);
    return counting ? rocksdb::Status::OK() : op((*cfs).at(id));
  }
  rocksdb::Status PutCF(std::uint32_t id, const rocksdb::Slice& k, const rocksdb::Slice& v) override {
    return to(id, [&](auto* cf) { return out->Put(cf, k, v); });
  }
  rocksdb::Status DeleteCF(std::uint32_t id, const rocksdb::Slice& k) override {
    return to(id, [&](auto* cf) { return out->Delete(cf, k); });
  }
  rocksdb::Status SingleDeleteCF(std::uint32_t id, const rocksdb::Slice& k) override {
    return to(id, [&](auto* cf) { return out->SingleDelete(cf, k); });
  }
  rocksdb::Status DeleteRangeCF(std::uint32_t id, const rocksdb::Slice& b, const rocksdb::Slice& e) override {
    return to(id, [&](auto* cf) { return out->DeleteRange(cf, b, e); });
  }
};

/// Writes `batches` synchronously, one write each: records/s, CPU per record.
rate write_all(rocksdb::DB& db, std::vector<rocksdb::WriteBatch>& batches) {
  rocksdb::WriteOptions wo;
  wo.sync = true;
  std::uint64_t records = 0;
  for (auto& b : batches) records += b.Count();
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = thread_cpu_seconds();
  for (auto& b : batches) bench::check(db.Write(wo, &b).ok(), "a replayed write succeeds");
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto n = static_cast<double>(records);
  return {n / secs, (thread_cpu_seconds() - cpu0) * 1e6 / n};
}

/// The order stream's raw measurement (`troupe_orders bench`), the same code.
rate raw(const fs::path& dir) {
  fresh_db f(dir, 0);
  rocksdb::WriteOptions wo;
  wo.sync = true;
  const std::string value(100, 'x');
  std::uint64_t n = 0;
  const auto t0 = std::chrono::steady_clock::now();
  const double cpu0 = thread_cpu_seconds();
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 1.0) {
    rocksdb::WriteBatch b;
    for (int i = 0; i < 1000; ++i, ++n) b.Put(std::to_string(n).insert(0, 1, 'k'), value);
    bench::check(f.db->Write(wo, &b).ok(), "a raw write succeeds");
  }
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const auto records = static_cast<double>(n);
  return {records / secs, (thread_cpu_seconds() - cpu0) * 1e6 / records};
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

int run(const std::vector<fs::path>& wal_dirs, const fs::path& dir, int repeat) {
  std::vector<std::pair<std::uint64_t, fs::path>> files;
  for (auto& d : wal_dirs)
    for (auto& e : fs::directory_iterator(d))
      if (e.path().extension() == ".log") files.emplace_back(std::stoull(e.path().stem().string()), e.path());
  std::sort(files.begin(), files.end());
  std::vector<std::string> reps;
  for (auto& [number, f] : files)
    for (auto& r : wal_batches(f)) reps.push_back(std::move(r));
  bench::check(!reps.empty(), "the WAL directories hold writes");

  copier count;
  count.counting = true;
  std::uint64_t records = 0, bytes = 0;
  for (auto& r : reps) {
    rocksdb::WriteBatch b(r);
    bench::check(b.Iterate(&count).ok(), "a write of the WAL decodes");
    records += b.Count();
    bytes += r.size();
  }
  const std::uint32_t families = count.highest_id;

  std::vector<double> raws, groups, batches, raw_cpu, group_cpu, batch_cpu;
  for (int round = 1; round <= repeat; ++round) {
    const auto r = raw(dir / "raw");
    rate g, b;
    {
      fresh_db f(dir / "groups", families);
      std::vector<rocksdb::WriteBatch> writes;
      writes.reserve(reps.size());
      for (auto& rep : reps) writes.emplace_back(rep);
      g = write_all(*f.db, writes);
    }
    {
      fresh_db f(dir / "batches", families);
      std::vector<rocksdb::WriteBatch> writes(1);
      copier c;
      c.cfs = &f.cfs;
      for (auto& rep : reps) {
        rocksdb::WriteBatch in(rep);
        c.out = &writes.back();
        bench::check(in.Iterate(&c).ok(), "a write is copied");
        if (writes.back().Count() >= 1000) writes.emplace_back();
      }
      b = write_all(*f.db, writes);
    }
    raws.push_back(r.records_per_second);
    groups.push_back(g.records_per_second);
    batches.push_back(b.records_per_second);
    raw_cpu.push_back(r.cpu_us_per_record);
    group_cpu.push_back(g.cpu_us_per_record);
    batch_cpu.push_back(b.cpu_us_per_record);
    std::cout << troupe::persistence::to_plain_json(boost::json::object{
                     {"round", round},
                     {"raw_records_per_second", r.records_per_second},
                     {"groups_records_per_second", g.records_per_second},
                     {"batches_records_per_second", b.records_per_second},
                     {"raw_cpu_us_per_record", r.cpu_us_per_record},
                     {"groups_cpu_us_per_record", g.cpu_us_per_record},
                     {"batches_cpu_us_per_record", b.cpu_us_per_record}})
              << std::endl;
  }
  const double raw_median = median(raws);
  std::cout << troupe::persistence::to_plain_json(boost::json::object{
                   {"wal_files", files.size()},
                   {"writes", reps.size()},
                   {"records", records},
                   {"bytes_per_record", static_cast<double>(bytes) / static_cast<double>(records)},
                   {"records_per_write", static_cast<double>(records) / static_cast<double>(reps.size())},
                   {"column_families", families + 1},
                   {"raw_records_per_second", raw_median},
                   {"groups_records_per_second", median(groups)},
                   {"batches_records_per_second", median(batches)},
                   {"groups_of_raw", median(groups) / raw_median},
                   {"batches_of_raw", median(batches) / raw_median},
                   {"raw_cpu_us_per_record", median(raw_cpu)},
                   {"groups_cpu_us_per_record", median(group_cpu)},
                   {"batches_cpu_us_per_record", median(batch_cpu)}})
            << std::endl;
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  std::vector<fs::path> wal_dirs;
  fs::path dir;
  int repeat = 5;
  bool bad = argc % 2 == 0; // options come in pairs
  for (int i = 1; i + 1 < argc && !bad; i += 2) {
    const std::string k = argv[i], v = argv[i + 1];
    if (k == "--wal")
      wal_dirs.emplace_back(v);
    else if (k == "--dir")
      dir = v;
    else if (k == "--repeat" && !v.empty() && std::all_of(v.begin(), v.end(), ::isdigit))
      repeat = std::stoi(v);
    else
      bad = true;
  }
  if (bad || wal_dirs.empty() || dir.empty() || repeat < 1) {
    std::cerr << "usage: troupe_bench_wal_replay --wal DIR [--wal DIR ...] --dir SCRATCH [--repeat K]\n";
    return 2;
  }
  try {
    return run(wal_dirs, dir, repeat);
  } catch (const std::exception& ex) {
    std::cerr << "troupe_bench_wal_replay: " << ex.what() << std::endl;
    return 1;
  }
}
