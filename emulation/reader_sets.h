// The reads of a shared byte since its last write, as the sanitizer keeps them (shared_shadow.h):
// one set per byte of (thread, latest stamp of its reads), numbered, and shared by every byte with
// the same history. A write races with a read unless that read happens before it; a thread's later
// read happens after its earlier ones, so its latest stamp stands for all of them, and the set of
// latest stamps is exactly what a write must be ordered after (FastTrack's read vector clock,
// Flanagan and Freund, PLDI 2009, kept sparse).
//
// Why numbered sets and not a list per byte: tiles are read by many threads at once (a wgmma's B
// operand by the 32 lanes of each warpgroup that hold a column, a K tile by every warp), so a list
// per byte would cost tens of entries for each of up to 228 KB, most of them equal. Bytes read in
// the same order by the same threads (a row of a tile, the two bytes of an element) follow the
// same transitions, so `add` remembers each transition once and a byte costs one number.
//
// Sets only grow until `compact` drops those no byte names any more. Header of the emulator only:
// standard headers, no project includes.
#pragma once

#include <stddef.h>
#include <stdint.h>

#include <unordered_map>
#include <vector>

namespace cpgen::emulation {

// One access of a byte: who, and the stamp of their clock then (happens_before.h).
struct Access {
  static constexpr int16_t kNobody = -1;
  int16_t actor = kNobody;
  uint32_t stamp = 0;
  bool none() const { return actor == kNobody; }
};

class ReaderSets {
 public:
  static constexpr uint32_t kEmpty = 0;  // the set of a byte no thread has read since its write

  ReaderSets() { clear(); }

  void clear() {
    sets_.assign(1, {});
    entries_ = 0;
    transitions_.clear();
    last_ = {};
  }

  const std::vector<Access>& members(uint32_t set) const { return sets_[set]; }
  size_t sets() const { return sets_.size(); }
  size_t entries() const { return entries_; }

  // The set `set` after a read by `reader`: its entry for the reader's thread takes the new stamp
  // (a thread's stamps only grow), or the reader joins.
  uint32_t add(uint32_t set, Access reader) {
    const Key key{set, reader.stamp, reader.actor};
    if (last_.valid && last_.key == key) return last_.to;
    uint32_t to;
    const auto known = transitions_.find(key);
    if (known != transitions_.end()) {
      to = known->second;
    } else {
      to = derive(set, reader);
      if (transitions_.size() >= kMaxTransitions) transitions_.clear();  // only a memo: safe to forget
      transitions_.emplace(key, to);
    }
    last_ = {true, key, to};
    return to;
  }

  // Keeps only the sets that `ids` name, renumbering them there; the remembered transitions go.
  void compact(std::vector<uint32_t>& ids) {
    std::vector<uint32_t> renumbered(sets_.size(), kUnmapped);
    std::vector<std::vector<Access>> kept(1);
    renumbered[kEmpty] = kEmpty;
    size_t entries = 0;
    for (uint32_t& id : ids) {
      if (renumbered[id] == kUnmapped) {
        renumbered[id] = static_cast<uint32_t>(kept.size());
        entries += sets_[id].size();
        kept.push_back(std::move(sets_[id]));
      }
      id = renumbered[id];
    }
    sets_ = std::move(kept);
    entries_ = entries;
    transitions_.clear();
    last_ = {};
  }

 private:
  static constexpr uint32_t kUnmapped = UINT32_MAX;
  static constexpr size_t kMaxTransitions = size_t{1} << 21;

  struct Key {
    uint32_t set;
    uint32_t stamp;
    int16_t actor;
    bool operator==(const Key& o) const { return set == o.set && stamp == o.stamp && actor == o.actor; }
  };
  struct KeyHash {
    size_t operator()(const Key& k) const {
      uint64_t h = (static_cast<uint64_t>(k.set) << 32) ^ k.stamp ^ (static_cast<uint64_t>(static_cast<uint16_t>(k.actor)) << 48);
      h ^= h >> 33;
      h *= 0xff51afd7ed558ccdULL;  // a 64-bit finalizer's mixing step (MurmurHash3's fmix64)
      h ^= h >> 33;
      return static_cast<size_t>(h);
    }
  };
  struct Last {
    bool valid = false;
    Key key{};
    uint32_t to = 0;
  };

  uint32_t derive(uint32_t set, Access reader) {
    std::vector<Access> next = sets_[set];
    bool found = false;
    for (Access& a : next)
      if (a.actor == reader.actor) {
        if (a.stamp >= reader.stamp) return set;  // an older or equal read adds nothing
        a.stamp = reader.stamp;
        found = true;
      }
    if (!found) next.push_back(reader);
    entries_ += next.size();
    sets_.push_back(std::move(next));
    return static_cast<uint32_t>(sets_.size() - 1);
  }

  std::vector<std::vector<Access>> sets_;
  size_t entries_ = 0;
  std::unordered_map<Key, uint32_t, KeyHash> transitions_;
  Last last_;
};

}  // namespace cpgen::emulation
