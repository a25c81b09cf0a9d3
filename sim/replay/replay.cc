#include "sim/replay/replay.h"

#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <set>

#include "absl/strings/str_format.h"
#include "core/device.h"
#include "sim/wire/scripted_io.h"
#include "wire/fields.h"
#include "wire/psn.h"

namespace droce::sim {
namespace {

using namespace droce::wire;
using namespace droce::core;

struct Packet {
  size_t index;
  const uint8_t* data;
  uint32_t len;
  ParsedPacket p;
  Gid src, dst;
  Mac src_mac;
  uint32_t psn;
  uint32_t dest_qp;
};

using ReplayIo = ScriptedIo;

Gid SrcGid(const uint8_t* f, const ParsedPacket& p) {
  Gid g{};
  if (p.ipv6) {
    std::memcpy(g.data(), Ipv6View(f + p.l3_offset).src(), 16);
  } else {
    g[10] = g[11] = 0xFF;
    StoreBe32(g.data() + 12, Ipv4View(f + p.l3_offset).src());
  }
  return g;
}
Gid DstGid(const uint8_t* f, const ParsedPacket& p) {
  Gid g{};
  if (p.ipv6) {
    std::memcpy(g.data(), Ipv6View(f + p.l3_offset).dst(), 16);
  } else {
    g[10] = g[11] = 0xFF;
    StoreBe32(g.data() + 12, Ipv4View(f + p.l3_offset).dst());
  }
  return g;
}

std::string GidText(const Gid& g) {
  if (IsIpv4MappedGid(g)) {
    return absl::StrFormat("%u.%u.%u.%u", g[12], g[13], g[14], g[15]);
  }
  std::string s;
  for (int i = 0; i < 16; i += 2) absl::StrAppendFormat(&s, "%s%x", i ? ":" : "", LoadBe16(&g[i]));
  return s;
}

bool IsRequest(const ParsedPacket& p) { return (p.op().roles & kRoleRequest) != 0; }

// A response reduced to what the equivalence rules compare.
struct Response {
  uint8_t opcode;
  uint32_t psn;
  uint8_t syndrome;  // AETH syndrome with ACK credits cleared
  bool has_aeth;
  uint32_t msn;
  uint32_t payload_len;
  std::vector<uint8_t> payload;
  uint64_t original;
  size_t capture_index;  // reference responses: frame number (1-based)
};

Response Reduce(const uint8_t* f, const ParsedPacket& p, size_t index) {
  const PacketFields fields = DecodeFields(f, p);
  Response r{};
  r.opcode = p.opcode;
  r.psn = fields.bth.psn;
  r.has_aeth = p.op().Has(kHdrAeth);
  r.syndrome = fields.aeth_syndrome;
  if (r.has_aeth && SyndromeType(r.syndrome) == AethType::kAck) r.syndrome &= 0xE0;
  r.msn = fields.aeth_msn;
  r.payload_len = p.payload_len;
  r.payload.assign(fields.payload.begin(), fields.payload.end());
  r.original = fields.atomic_ack_original;
  r.capture_index = index;
  return r;
}

bool IsPlainAck(const Response& r) {
  return r.opcode == kRcAcknowledge && SyndromeType(r.syndrome) == AethType::kAck;
}

std::string Describe(const Response& r) {
  std::string s = absl::StrFormat("%s psn=%u", OpInfo(r.opcode).name, r.psn);
  if (r.has_aeth) absl::StrAppendFormat(&s, " %s msn=%u", AethDescription(r.syndrome), r.msn);
  if (r.payload_len) absl::StrAppendFormat(&s, " len=%u", r.payload_len);
  if (r.opcode == kRcAtomicAcknowledge) absl::StrAppendFormat(&s, " orig=0x%x", r.original);
  if (r.capture_index) absl::StrAppendFormat(&s, " (frame %u)", r.capture_index);
  return s;
}

struct Region {
  uint64_t lo = UINT64_MAX, hi = 0;
  std::vector<uint8_t> mem;
  std::vector<uint8_t> known;  // 1 where the capture wrote the byte before
  std::vector<uint8_t> atomic_init;
  uint32_t droce_rkey = 0;
};

// Path MTU of the A -> B connection: the payload of any FIRST/MIDDLE packet
// (requests, or READ responses coming back), else the smallest power of two
// >= 256 holding the largest payload.
uint32_t InferMtu(const std::vector<Packet>& all, const Gid& a, const Gid& b) {
  uint32_t mtu = 0, max_payload = 0;
  for (const Packet& k : all) {
    const OpcodeInfo& op = k.p.op();
    const bool a_to_b = k.src == a && k.dst == b && IsRequest(k.p);
    const bool b_to_a = k.src == b && k.dst == a && (op.roles & kRoleReadResponse);
    if (!a_to_b && !b_to_a) continue;
    max_payload = std::max<uint32_t>(max_payload, k.p.payload_len);
    if ((op.roles & kRolePayload) && !(op.roles & kRoleLast)) mtu = std::max<uint32_t>(mtu, k.p.payload_len);
  }
  if (mtu == 0) {
    mtu = 256;
    while (mtu < max_payload && mtu < 4096) mtu *= 2;
  }
  return mtu;
}

// What both replay directions share: the capture, the two endpoints (A is
// the requester, B the responder) and the result being built.
class ReplayBase {
 protected:
  ReplayBase(const std::vector<Packet>& all, const Gid& a, const Gid& b) : all_(all), a_(a), b_(b) {
    result_.direction = GidText(a_) + " -> " + GidText(b_);
  }
  bool FromAToB(const Packet& k) const { return k.src == a_ && k.dst == b_; }
  bool FromBToA(const Packet& k) const { return k.src == b_ && k.dst == a_; }

  const std::vector<Packet>& all_;
  Gid a_, b_;
  ReplayResult result_;
  ReplayIo io_;
  std::unique_ptr<Device> dev_;
};

class DirectionReplay : public ReplayBase {
 public:
  DirectionReplay(const std::vector<Packet>& all, const Gid& a, const Gid& b) : ReplayBase(all, a, b) {}

  ReplayResult Run() {
    if (!Configure()) return result_;
    Feed();
    Compare();
    return result_;
  }

 private:
  bool Configure() {
    const Packet* first_req = nullptr;
    uint32_t a_qpn = 0;
    uint8_t rnr_timer = 12;
    Mac a_mac{}, b_mac{};
    bool have_b_mac = false;
    for (const Packet& k : all_) {
      const OpcodeInfo& op = k.p.op();
      if (FromAToB(k) && IsRequest(k.p)) {
        if (!first_req) first_req = &k;
        a_mac = k.src_mac;
        const PacketFields f = DecodeFields(k.data, k.p);
        if (op.Has(kHdrReth)) Widen(f.reth_rkey, f.reth_va, f.reth_length);
        if (op.Has(kHdrAtomicEth)) Widen(f.atomic_rkey, f.atomic_va, 8);
      }
      if (FromBToA(k) && !IsRequest(k.p)) {
        if (a_qpn == 0) a_qpn = k.dest_qp;
        b_mac = k.src_mac;
        have_b_mac = true;
        const PacketFields f = DecodeFields(k.data, k.p);
        if (k.p.opcode == kRcAcknowledge && SyndromeType(f.aeth_syndrome) == AethType::kRnrNak) {
          rnr_timer = SyndromeValue(f.aeth_syndrome);
        }
      }
    }
    if (!have_b_mac) {
      // The responder never answered: nothing to compare against.
      result_.skipped = true;
      result_.skip_reason = "no responses from the responder in the capture";
      return false;
    }
    const uint32_t mtu = InferMtu(all_, a_, b_);
    result_.mtu = mtu;
    b_qpn_ = first_req->dest_qp;

    DeviceConfig cfg;
    cfg.mac = b_mac;
    const bool v4 = IsIpv4MappedGid(b_);
    if (v4) cfg.ipv4 = LoadBe32(b_.data() + 12);
    cfg.ecn = kEcnNotEct;
    cfg.cnp_enabled = false;  // rxe (Linux 6.1) has no notification point  // rxe sends Not-ECT; keep the bytes comparable
    dev_ = std::make_unique<Device>(cfg, &io_);
    if (!v4 && dev_->gids()[0] != b_) {
      result_.skipped = true;
      result_.skip_reason = "responder's IPv6 GID is not its link-local EUI-64 address";
      return false;
    }
    pd_ = dev_->AllocPd();
    cq_ = *dev_->CreateCq(1 << 16);
    recv_mem_.assign(1 << 20, 0);
    recv_key_ = *dev_->RegMr(pd_, recv_mem_.data(), recv_mem_.size(), 0x10000000, mem::kLocalWrite);
    for (auto& [rkey, r] : regions_) {
      r.mem.assign(r.hi - r.lo + 8, 0);
      r.known.assign(r.mem.size(), 0);
      r.atomic_init.assign(r.mem.size(), 0);
      auto keys = dev_->RegMr(pd_, r.mem.data(), r.mem.size(), r.lo,
                              mem::kLocalWrite | mem::kRemoteWrite | mem::kRemoteRead |
                                  mem::kRemoteAtomic);
      if (!keys.ok()) {
        result_.skipped = true;
        result_.skip_reason = std::string(keys.status().message());
        return false;
      }
      r.droce_rkey = keys->rkey;
    }
    QpInitAttr init;
    init.pd = pd_;
    init.send_cq = init.recv_cq = cq_;
    init.caps.max_recv_wr = 1024;
    droce_qpn_ = *dev_->CreateQp(init);
    transport::QpAttr attr;
    attr.qp_state = transport::QpState::kInit;
    attr.qp_access_flags = mem::kLocalWrite | mem::kRemoteWrite | mem::kRemoteRead | mem::kRemoteAtomic;
    (void)dev_->ModifyQp(droce_qpn_, attr, transport::kAttrState | transport::kAttrPkeyIndex |
                                               transport::kAttrPort | transport::kAttrAccessFlags);
    attr.qp_state = transport::QpState::kRtr;
    attr.ah.dgid = a_;
    attr.ah.sgid_index = v4 ? 1 : 0;
    attr.ah.dmac = a_mac;
    attr.ah.dmac_valid = true;
    attr.path_mtu = mtu;
    attr.dest_qp_num = a_qpn;
    attr.rq_psn = first_req->psn;
    attr.max_dest_rd_atomic = 16;
    attr.min_rnr_timer = rnr_timer;
    const absl::Status s = dev_->ModifyQp(
        droce_qpn_, attr,
        transport::kAttrState | transport::kAttrAv | transport::kAttrPathMtu |
            transport::kAttrDestQpn | transport::kAttrRqPsn | transport::kAttrMaxDestRdAtomic |
            transport::kAttrMinRnrTimer);
    if (!s.ok()) {
      result_.skipped = true;
      result_.skip_reason = std::string(s.message());
      return false;
    }
    return true;
  }

  void Widen(uint32_t rkey, uint64_t va, uint64_t len) {
    Region& r = regions_[rkey];
    r.lo = std::min(r.lo, va);
    r.hi = std::max(r.hi, va + len);
  }

  Region* RegionFor(uint32_t rkey) {
    auto it = regions_.find(rkey);
    return it == regions_.end() ? nullptr : &it->second;
  }

  // Whether rxe answered the request at `index` (PSN psn) with an RNR NAK.
  bool RxeSentRnrFor(size_t index, uint32_t psn) const {
    for (const Packet& k : all_) {
      if (k.index <= index || !FromBToA(k) || IsRequest(k.p)) continue;
      if (k.p.opcode != kRcAcknowledge) continue;
      if (PsnLess(k.psn, psn)) continue;
      const uint8_t syn = AethView(k.data + k.p.bth_offset + kBthBytes).syndrome();
      return k.psn == psn && SyndromeType(syn) == AethType::kRnrNak;
    }
    return false;
  }

  void Feed() {
    uint64_t now = 1'000'000;
    for (const Packet& k : all_) {
      if (FromBToA(k) && !IsRequest(k.p)) {
        reference_.push_back(Reduce(k.data, k.p, k.index + 1));
        continue;
      }
      if (!FromAToB(k) || !IsRequest(k.p)) continue;
      PacketFields f = DecodeFields(k.data, k.p);
      const OpcodeInfo& op = k.p.op();
      transport::Qp* qp = dev_->qp(droce_qpn_);
      const bool expected = f.bth.psn == qp->expected_psn();
      // Receives: present exactly when rxe had one (its RNR NAKs say when it did not).
      const bool consumes_recv = ((op.roles & kRoleSend) && (op.roles & kRoleFirst)) ||
                                 (op.Has(kHdrImmDt) && (op.roles & kRoleWrite));
      if (expected && consumes_recv && qp->posted_receives() == 0 && !RxeSentRnrFor(k.index, f.bth.psn)) {
        transport::RecvWr wr;
        wr.wr_id = ++recv_id_;
        wr.num_sge = 1;
        wr.sg_list[0] = {0x10000000, static_cast<uint32_t>(recv_mem_.size()), recv_key_.lkey};
        (void)dev_->PostRecv(droce_qpn_, wr);
      }
      // Memory the capture's requests name: rkeys map to droce's.
      if (op.Has(kHdrReth)) {
        if (Region* r = RegionFor(f.reth_rkey)) {
          if ((op.roles & kRoleReadRequest) && expected) {
            read_known_.push_back(Known(*r, f.reth_va, f.reth_length));
          }
          if ((op.roles & kRoleWrite) && expected) {
            std::fill_n(r->known.begin() + (f.reth_va - r->lo), f.reth_length, 1);
          }
          f.reth_rkey = r->droce_rkey;
        }
      }
      if (op.Has(kHdrAtomicEth)) {
        if (Region* r = RegionFor(f.atomic_rkey)) {
          PrimeAtomic(*r, k, f.atomic_va);
          f.atomic_rkey = r->droce_rkey;
        }
      }
      // The immediate each new message carries, as its wire bytes (one per PSN: an RNR'd request comes again).
      if (expected && op.Has(kHdrImmDt) &&
          std::none_of(immediates_.begin(), immediates_.end(), [&](const auto& e) { return e.first == f.bth.psn; })) {
        immediates_.emplace_back(f.bth.psn, ImmDtView(k.data + k.p.bth_offset + op.immdt_offset).wire_order());
      }
      f.bth.dest_qp = droce_qpn_;
      std::vector<uint8_t> frame(pktio::kMaxFrameBytes);
      auto n = SerializeFields(f, frame.data(), static_cast<uint32_t>(frame.size()));
      if (!n.ok()) continue;
      frame.resize(*n);
      io_.rx.push_back(std::move(frame));
      ++result_.requests_fed;
      for (int i = 0; i < 4; ++i) dev_->Poll(now += 1000);
    }
    for (int i = 0; i < 16; ++i) dev_->Poll(now += 1000);
    CheckImmediates();
    for (const auto& bytes : io_.sent) {
      const ParsedPacket p = ParseAndVerify(bytes.data(), static_cast<uint32_t>(bytes.size()));
      if (!p.ok()) {
        result_.mismatches.push_back(absl::StrFormat("droce sent an invalid packet (%s)", ParseStatusName(p.status)));
        continue;
      }
      droce_.push_back(Reduce(bytes.data(), p, 0));
    }
    result_.reference_responses = static_cast<uint32_t>(reference_.size());
    result_.droce_responses = static_cast<uint32_t>(droce_.size());
  }

  // Every immediate rxe's requester sent must reach droce's receive
  // completion byte for byte (ibv_wc.imm_data is the completion's value,
  // unchanged), in message order.
  void CheckImmediates() {
    std::vector<uint32_t> got;
    queue::Completion wc[64];
    for (uint32_t n; (n = dev_->PollCq(cq_, wc, 64)) > 0;) {
      for (uint32_t i = 0; i < n; ++i) {
        if (wc[i].status == queue::WcStatus::kSuccess && (wc[i].flags & queue::kWcWithImm)) {
          got.push_back(wc[i].imm_or_inv);
        }
      }
    }
    auto bytes = [](uint32_t v) {
      uint8_t b[4];
      std::memcpy(b, &v, 4);
      return absl::StrFormat("%02x %02x %02x %02x", b[0], b[1], b[2], b[3]);
    };
    for (size_t i = 0; i < std::max(got.size(), immediates_.size()); ++i) {
      if (i >= got.size()) {
        result_.mismatches.push_back(absl::StrFormat("no completion for the immediate of PSN %u (%s)",
                                                     immediates_[i].first, bytes(immediates_[i].second)));
      } else if (i >= immediates_.size()) {
        result_.mismatches.push_back("a completion with an immediate no request carried: " + bytes(got[i]));
      } else if (got[i] != immediates_[i].second) {
        result_.mismatches.push_back(absl::StrFormat("immediate of PSN %u: the wire carried %s, the completion has %s",
                                                     immediates_[i].first, bytes(immediates_[i].second),
                                                     bytes(got[i])));
      } else {
        ++result_.immediates_checked;
      }
    }
  }

  // Whether READ data for [va, va+len) can be compared (written earlier in the capture).
  bool Known(const Region& r, uint64_t va, uint32_t len) const {
    if (len == 0) return false;
    for (uint64_t i = va - r.lo; i < va - r.lo + len; ++i) {
      if (!r.known[i]) return false;
    }
    return true;
  }

  // The memory an atomic operates on is not in the capture: start it at the
  // original value rxe reported for the first atomic on that address.
  void PrimeAtomic(Region& r, const Packet& req, uint64_t va) {
    const uint64_t off = va - r.lo;
    if (off + 8 > r.mem.size() || r.atomic_init[off]) return;
    for (const Packet& k : all_) {
      if (k.index <= req.index || !FromBToA(k) || k.p.opcode != kRcAtomicAcknowledge) continue;
      if (k.psn != req.psn) continue;
      const uint64_t orig = DecodeFields(k.data, k.p).atomic_ack_original;
      std::memcpy(r.mem.data() + off, &orig, 8);
      r.atomic_init[off] = 1;
      return;
    }
  }

  // Responses to requests answered before (duplicates) depend on timing:
  // whether a duplicate still finds its READ/atomic in the responder's
  // resource window, and when it arrives relative to the original. They are
  // set aside and checked only for consistency (droce's must be one rxe also
  // sent); first responses are compared in order.
  static void SplitDuplicates(const std::vector<Response>& all, std::vector<Response>* first,
                              std::vector<Response>* dups) {
    std::map<std::pair<uint8_t, uint32_t>, int> seen;
    for (const Response& r : all) {
      const auto key = std::make_pair(IsPlainAck(r) ? uint8_t{kRcAcknowledge} : r.opcode, r.psn);
      (seen[key]++ == 0 ? first : dups)->push_back(r);
    }
  }

  void Compare() {
    std::vector<Response> ref_dups, droce_dups;
    {
      std::vector<Response> all;
      all.swap(reference_);
      SplitDuplicates(all, &reference_, &ref_dups);
      all.clear();
      all.swap(droce_);
      SplitDuplicates(all, &droce_, &droce_dups);
    }
    for (const Response& d : droce_dups) {
      if (IsPlainAck(d)) continue;
      const bool rxe_too = std::any_of(ref_dups.begin(), ref_dups.end(), [&](const Response& r) {
        return r.opcode == d.opcode && r.psn == d.psn && r.payload_len == d.payload_len &&
               r.original == d.original;
      });
      if (!rxe_too) result_.mismatches.push_back("droce answered a duplicate rxe did not: " + Describe(d));
    }
    size_t i = 0, j = 0;  // reference_, droce_
    size_t reads = 0;
    auto mismatch = [&](const std::string& what) { result_.mismatches.push_back(what); };
    while (i < reference_.size() || j < droce_.size()) {
      // ACK runs up to the next other response.
      uint32_t ref_max = 0, droce_max = 0;
      bool ref_any = false, droce_any = false;
      std::map<uint32_t, uint32_t> ref_msn;
      const size_t i0 = i;
      for (; i < reference_.size() && IsPlainAck(reference_[i]); ++i) {
        if (!ref_any || PsnLess(ref_max, reference_[i].psn)) ref_max = reference_[i].psn;
        ref_any = true;
        ref_msn[reference_[i].psn] = reference_[i].msn;
      }
      for (; j < droce_.size() && IsPlainAck(droce_[j]); ++j) {
        if (!droce_any || PsnLess(droce_max, droce_[j].psn)) droce_max = droce_[j].psn;
        droce_any = true;
        auto it = ref_msn.find(droce_[j].psn);
        if (it != ref_msn.end() && it->second != droce_[j].msn) {
          mismatch("ACK " + Describe(droce_[j]) + ": rxe's ACK for that PSN had msn " +
                   std::to_string(it->second));
        }
      }
      if (ref_any != droce_any || (ref_any && ref_max != droce_max)) {
        mismatch(absl::StrFormat("acknowledged up to %s by rxe (from frame %u) but %s by droce",
                                 ref_any ? std::to_string(ref_max) : "nothing",
                                 i0 < reference_.size() ? reference_[i0].capture_index : 0,
                                 droce_any ? std::to_string(droce_max) : "nothing"));
      }
      if (i >= reference_.size() && j >= droce_.size()) break;
      if (i >= reference_.size()) {
        mismatch("droce sent an extra " + Describe(droce_[j++]));
        continue;
      }
      if (j >= droce_.size()) {
        mismatch("droce did not send " + Describe(reference_[i++]));
        continue;
      }
      const Response& r = reference_[i++];
      const Response& d = droce_[j++];
      if (r.opcode != d.opcode || r.psn != d.psn || r.has_aeth != d.has_aeth ||
          (r.has_aeth && (r.syndrome != d.syndrome || r.msn != d.msn)) ||
          r.payload_len != d.payload_len ||
          (r.opcode == kRcAtomicAcknowledge && r.original != d.original)) {
        mismatch("rxe sent " + Describe(r) + ", droce sent " + Describe(d));
        continue;
      }
      if (OpInfo(r.opcode).roles & kRoleReadResponse) {
        (void)reads;
        if (r.payload != d.payload && CompareReadData()) {
          mismatch("READ data differs: " + Describe(r));
        }
      }
    }
  }

  // READ payloads are compared only when every READ named bytes the capture
  // wrote first (otherwise droce's memory holds zeros where rxe's held
  // whatever the application had there).
  bool CompareReadData() const {
    return !read_known_.empty() &&
           std::all_of(read_known_.begin(), read_known_.end(), [](bool b) { return b; });
  }

  uint32_t pd_ = 0, cq_ = 0, droce_qpn_ = 0, b_qpn_ = 0;
  std::vector<std::pair<uint32_t, uint32_t>> immediates_;  // PSN, ImmDt in wire order
  std::map<uint32_t, Region> regions_;
  std::vector<uint8_t> recv_mem_;
  mem::MrKeys recv_key_{};
  uint64_t recv_id_ = 0;
  std::vector<bool> read_known_;
  std::vector<Response> reference_, droce_;
};

// Drives a droce requester with the work requests the capture implies and
// rxe's responses; compares the request packets droce emits.
class RequesterReplay : public ReplayBase {
 public:
  RequesterReplay(const std::vector<Packet>& all, const Gid& a, const Gid& b) : ReplayBase(all, a, b) {}

  ReplayResult Run() {
    if (!Configure()) return result_;
    Drive();
    Compare();
    return result_;
  }

 private:
  void Skip(std::string why) {
    result_.skipped = true;
    result_.skip_reason = std::move(why);
  }

  bool Configure() {
    Mac a_mac{}, b_mac{};
    uint32_t b_qpn = 0;
    for (const Packet& k : all_) {
      if (FromAToB(k) && IsRequest(k.p)) {
        a_mac = k.src_mac;
        b_qpn = k.dest_qp;
        // First transmission of each PSN, in PSN order of first appearance.
        if (seen_.insert(k.psn).second) reference_.push_back(&k);
      } else if (FromBToA(k) && !IsRequest(k.p)) {
        b_mac = k.src_mac;
        if (capture_a_qpn_ == 0) capture_a_qpn_ = k.dest_qp;
      }
    }
    if (capture_a_qpn_ == 0) {
      Skip("no responses from the responder in the capture");
      return false;
    }
    // Loss before the capture point can make a retransmission the first
    // appearance of a PSN: order by PSN from the first one seen.
    const uint32_t base = reference_.front()->psn;
    std::stable_sort(reference_.begin(), reference_.end(), [base](const Packet* x, const Packet* y) {
      return PsnDiff(x->psn, base) < PsnDiff(y->psn, base);
    });
    result_.mtu = InferMtu(all_, a_, b_);
    DeviceConfig cfg;
    cfg.mac = a_mac;
    const bool v4 = IsIpv4MappedGid(a_);
    if (v4) cfg.ipv4 = LoadBe32(a_.data() + 12);
    cfg.ecn = kEcnNotEct;
    cfg.cnp_enabled = false;  // rxe (Linux 6.1) has no notification point
    dev_ = std::make_unique<Device>(cfg, &io_);
    if (!v4 && dev_->gids()[0] != a_) {
      Skip("requester's IPv6 GID is not its link-local EUI-64 address");
      return false;
    }
    pd_ = dev_->AllocPd();
    cq_ = *dev_->CreateCq(1 << 16);
    QpInitAttr init;
    init.pd = pd_;
    init.send_cq = init.recv_cq = cq_;
    init.caps.max_send_wr = 1 << 14;
    qpn_ = *dev_->CreateQp(init);
    if (!BuildWorkRequests()) return false;
    transport::QpAttr attr;
    attr.qp_state = transport::QpState::kInit;
    absl::Status s = dev_->ModifyQp(qpn_, attr, transport::kAttrState | transport::kAttrPkeyIndex |
                                                   transport::kAttrPort | transport::kAttrAccessFlags);
    attr.qp_state = transport::QpState::kRtr;
    attr.ah.dgid = b_;
    attr.ah.sgid_index = v4 ? 1 : 0;
    attr.ah.dmac = b_mac;
    attr.ah.dmac_valid = true;
    attr.path_mtu = result_.mtu;
    attr.dest_qp_num = b_qpn;
    if (s.ok()) {
      s = dev_->ModifyQp(qpn_, attr, transport::kAttrState | transport::kAttrAv | transport::kAttrPathMtu |
                                         transport::kAttrDestQpn | transport::kAttrRqPsn |
                                         transport::kAttrMaxDestRdAtomic | transport::kAttrMinRnrTimer);
    }
    attr.qp_state = transport::QpState::kRts;
    attr.sq_psn = reference_.front()->psn;
    attr.max_rd_atomic = 16;
    attr.timeout = 20;  // ~4 s: no timeouts while responses are fed in capture order
    attr.rnr_retry = 7;
    if (s.ok()) {
      s = dev_->ModifyQp(qpn_, attr, transport::kAttrState | transport::kAttrSqPsn | transport::kAttrTimeout |
                                         transport::kAttrRetryCnt | transport::kAttrRnrRetry |
                                         transport::kAttrMaxQpRdAtomic);
    }
    if (!s.ok()) {
      Skip(std::string(s.message()));
      return false;
    }
    return true;
  }

  // One work request per message of the capture's requester.
  bool BuildWorkRequests() {
    std::vector<transport::SendWr> wrs;
    std::vector<std::vector<uint8_t>> payloads;
    size_t i = 0;
    while (i < reference_.size()) {
      const Packet& k = *reference_[i];
      const OpcodeInfo& op = k.p.op();
      const PacketFields f = DecodeFields(k.data, k.p);
      transport::SendWr wr;
      wr.wr_id = wrs.size();
      wr.flags = transport::kSendSignaled;
      std::vector<uint8_t> data;
      if (!(op.roles & kRoleFirst)) {
        Skip(absl::StrFormat("the capture starts inside a message (frame %u)", k.index + 1));
        return false;
      }
      if (k.p.opcode == kRcReadRequest) {
        wr.opcode = transport::WrOpcode::kRdmaRead;
        wr.remote_addr = f.reth_va;
        wr.rkey = f.reth_rkey;
        data.resize(f.reth_length);
        ++i;
      } else if (op.roles & kRoleAtomic) {
        wr.opcode = k.p.opcode == kRcCompareSwap ? transport::WrOpcode::kAtomicCmpAndSwp
                                                  : transport::WrOpcode::kAtomicFetchAndAdd;
        wr.remote_addr = f.atomic_va;
        wr.rkey = f.atomic_rkey;
        wr.compare_add = k.p.opcode == kRcCompareSwap ? f.atomic_compare : f.atomic_swap_add;
        wr.swap = f.atomic_swap_add;
        data.resize(8);
        ++i;
      } else {
        const bool write = op.roles & kRoleWrite;
        if (write) {
          wr.remote_addr = f.reth_va;
          wr.rkey = f.reth_rkey;
        }
        // Gather the message's packets up to its LAST/ONLY.
        for (;; ++i) {
          if (i >= reference_.size()) {
            Skip("the capture ends inside a message");
            return false;
          }
          const Packet& m = *reference_[i];
          const OpcodeInfo& mop = m.p.op();
          data.insert(data.end(), m.data + m.p.payload_offset, m.data + m.p.payload_offset + m.p.payload_len);
          if (!(mop.roles & kRoleLast)) continue;
          const PacketFields last = DecodeFields(m.data, m.p);
          // As a program would: the immediate's wire bytes, unswapped (a __be32).
          if (mop.Has(kHdrImmDt)) wr.imm_data = ImmDtView(m.data + m.p.bth_offset + mop.immdt_offset).wire_order();
          if (mop.Has(kHdrIeth)) wr.invalidate_rkey = last.ieth_rkey;
          if (last.bth.solicited) wr.flags |= transport::kSendSolicited;
          const bool imm = mop.Has(kHdrImmDt), inv = mop.Has(kHdrIeth);
          wr.opcode = write ? (imm ? transport::WrOpcode::kRdmaWriteWithImm : transport::WrOpcode::kRdmaWrite)
                            : (imm ? transport::WrOpcode::kSendWithImm
                                   : inv ? transport::WrOpcode::kSendWithInv : transport::WrOpcode::kSend);
          ++i;
          break;
        }
      }
      wrs.push_back(wr);
      payloads.push_back(std::move(data));
    }
    // Local buffers: the payloads back to back in one region.
    size_t total = 0;
    for (const auto& d : payloads) total += d.size() + 8;
    local_.assign(total + 8, 0);
    auto keys = dev_->RegMr(pd_, local_.data(), local_.size(), 0x20000000, mem::kLocalWrite);
    if (!keys.ok()) {
      Skip(std::string(keys.status().message()));
      return false;
    }
    size_t off = 0;
    for (size_t w = 0; w < wrs.size(); ++w) {
      if (!payloads[w].empty()) std::memcpy(local_.data() + off, payloads[w].data(), payloads[w].size());
      wrs[w].num_sge = 1;
      wrs[w].sg_list[0] = {0x20000000 + off, static_cast<uint32_t>(payloads[w].size()), keys->lkey};
      off += payloads[w].size() + 8;
    }
    wrs_ = std::move(wrs);
    return true;
  }

  void Drive() {
    for (const transport::SendWr& wr : wrs_) {
      if (int err = dev_->PostSend(qpn_, wr); err != 0) {
        result_.mismatches.push_back(absl::StrFormat("post_send of WR %u failed: errno %d", wr.wr_id, err));
        return;
      }
    }
    uint64_t now = 1'000'000;
    auto pump = [&](int rounds) {
      for (int r = 0; r < rounds; ++r) {
        const uint32_t work = dev_->Poll(now);
        now += work ? 1000 : 1'000'000;  // idle: let RNR timers run out
      }
    };
    pump(4);
    for (const Packet& k : all_) {
      if (!FromBToA(k) || IsRequest(k.p)) continue;
      PacketFields f = DecodeFields(k.data, k.p);
      f.bth.dest_qp = qpn_;
      std::vector<uint8_t> frame(pktio::kMaxFrameBytes);
      auto n = SerializeFields(f, frame.data(), static_cast<uint32_t>(frame.size()));
      if (!n.ok()) continue;
      frame.resize(*n);
      // Answer only what droce has sent; wait (in virtual time) for the rest.
      for (int tries = 0; tries < 64 && !Sent(k.psn); ++tries) pump(1);
      io_.rx.push_back(std::move(frame));
      ++result_.requests_fed;
      pump(2);
    }
    pump(16);
    queue::Completion wc[64];
    uint32_t ok = 0;
    for (uint32_t n; (n = dev_->PollCq(cq_, wc, 64)) > 0;) {
      for (uint32_t i = 0; i < n; ++i) {
        if (wc[i].status == queue::WcStatus::kSuccess) {
          ++ok;
        } else {
          result_.mismatches.push_back(absl::StrFormat("WR %u completed with %s", wc[i].wr_id,
                                                       queue::WcStatusName(wc[i].status)));
        }
      }
    }
    if (ok != wrs_.size()) {
      result_.mismatches.push_back(absl::StrFormat("%u of %u work requests completed successfully",
                                                   ok, wrs_.size()));
    }
  }

  // Whether droce has transmitted PSN `psn` (or any later one).
  bool Sent(uint32_t psn) {
    for (; scanned_ < io_.sent.size(); ++scanned_) {
      const auto& b = io_.sent[scanned_];
      const ParsedPacket p = ParsePacket(b.data(), static_cast<uint32_t>(b.size()));
      if (p.ok()) {
        const uint32_t s = BthView(b.data() + p.bth_offset).psn();
        if (!any_sent_ || PsnLess(highest_sent_, s)) highest_sent_ = s;
        any_sent_ = true;
      }
    }
    return any_sent_ && !PsnLess(highest_sent_, psn);
  }

  void Compare() {
    std::map<uint32_t, std::vector<uint8_t>> first;  // droce's first transmission per PSN
    for (const auto& b : io_.sent) {
      const ParsedPacket p = ParseAndVerify(b.data(), static_cast<uint32_t>(b.size()));
      if (!p.ok()) {
        result_.mismatches.push_back(absl::StrFormat("droce sent an invalid packet (%s)", ParseStatusName(p.status)));
        continue;
      }
      first.emplace(BthView(b.data() + p.bth_offset).psn(), b);
    }
    result_.droce_responses = static_cast<uint32_t>(first.size());
    result_.reference_responses = static_cast<uint32_t>(reference_.size());
    for (const Packet* k : reference_) {
      auto it = first.find(k->psn);
      const PacketFields r = DecodeFields(k->data, k->p);
      if (it == first.end()) {
        result_.mismatches.push_back(absl::StrFormat("droce never sent PSN %u (%s, frame %u)", k->psn,
                                                     k->p.op().name, k->index + 1));
        continue;
      }
      const ParsedPacket dp = ParsePacket(it->second.data(), static_cast<uint32_t>(it->second.size()));
      const PacketFields d = DecodeFields(it->second.data(), dp);
      const bool last = k->p.op().roles & kRoleLast;
      std::string diff;
      if (r.bth.opcode != d.bth.opcode) diff += absl::StrFormat(" opcode %s vs %s", OpInfo(r.bth.opcode).name, OpInfo(d.bth.opcode).name);
      if (r.bth.solicited != d.bth.solicited) diff += " solicited";
      if (last && r.bth.ack_req != d.bth.ack_req) diff += " ackreq";
      if (r.reth_va != d.reth_va || r.reth_rkey != d.reth_rkey || r.reth_length != d.reth_length) diff += " reth";
      if (r.atomic_va != d.atomic_va || r.atomic_rkey != d.atomic_rkey || r.atomic_swap_add != d.atomic_swap_add ||
          r.atomic_compare != d.atomic_compare) {
        diff += " atomic";
      }
      if (r.imm_data != d.imm_data) diff += " immdt";
      if (r.ieth_rkey != d.ieth_rkey) diff += " ieth";
      if (r.bth.dest_qp != d.bth.dest_qp) diff += " destqp";
      if (r.payload.size() != d.payload.size() ||
          !std::equal(r.payload.begin(), r.payload.end(), d.payload.begin())) {
        diff += absl::StrFormat(" payload(%u vs %u bytes)", r.payload.size(), d.payload.size());
      }
      if (!diff.empty()) {
        result_.mismatches.push_back(absl::StrFormat("PSN %u (%s, frame %u) differs:%s", k->psn,
                                                     k->p.op().name, k->index + 1, diff));
      }
    }
  }

  uint32_t pd_ = 0, cq_ = 0, qpn_ = 0, capture_a_qpn_ = 0;
  std::set<uint32_t> seen_;
  std::vector<const Packet*> reference_;
  std::vector<transport::SendWr> wrs_;
  std::vector<uint8_t> local_;
  size_t scanned_ = 0;
  uint32_t highest_sent_ = 0;
  bool any_sent_ = false;
};

// Parses a capture into RC packets, or says why it cannot be replayed.
std::optional<ReplayResult> LoadPackets(const std::vector<CapturedFrame>& frames,
                                        std::vector<Packet>* packets) {
  for (size_t i = 0; i < frames.size(); ++i) {
    const CapturedFrame& fr = frames[i];
    const ParsedPacket probe = ParsePacket(fr.bytes.data(), static_cast<uint32_t>(fr.bytes.size()));
    if (IsForeign(probe.status)) continue;
    ReplayResult r;
    r.skipped = true;
    if (fr.wire_len > fr.bytes.size()) {
      r.skip_reason = "capture cut at snaplen: payloads and ICRCs missing";
      return r;
    }
    const ParsedPacket p = ParseAndVerify(fr.bytes.data(), static_cast<uint32_t>(fr.bytes.size()));
    if (!p.ok()) {
      r.skip_reason = absl::StrFormat("frame %u does not verify (%s)", i + 1, ParseStatusName(p.status));
      return r;
    }
    if (p.op().transport != Transport::kRc) {
      r.skip_reason = p.op().transport == Transport::kUc
                          ? "UC traffic: the responder sends nothing to compare"
                          : "UD traffic mixed with RC: replay UD captures on their own";
      return r;
    }
    Packet k{i, fr.bytes.data(), static_cast<uint32_t>(fr.bytes.size()), p,
             SrcGid(fr.bytes.data(), p), DstGid(fr.bytes.data(), p), {}, 0, 0};
    std::memcpy(k.src_mac.data(), EthView(fr.bytes.data()).src_mac(), 6);
    const BthView bth(fr.bytes.data() + p.bth_offset);
    k.psn = bth.psn();
    k.dest_qp = bth.dest_qp();
    packets->push_back(k);
  }
  return std::nullopt;
}

std::vector<std::pair<Gid, Gid>> RequestDirections(const std::vector<Packet>& packets) {
  std::vector<std::pair<Gid, Gid>> directions;
  for (const Packet& k : packets) {
    if (!IsRequest(k.p)) continue;
    const auto d = std::make_pair(k.src, k.dst);
    if (std::find(directions.begin(), directions.end(), d) == directions.end()) directions.push_back(d);
  }
  return directions;
}

}  // namespace

namespace {

// Runs one Replay class per direction that carries RC requests.
template <typename Replay>
std::vector<ReplayResult> ReplayEachDirection(const std::vector<CapturedFrame>& frames) {
  std::vector<Packet> packets;
  if (auto skip = LoadPackets(frames, &packets)) return {*skip};
  const auto directions = RequestDirections(packets);
  if (directions.empty()) {
    ReplayResult r;
    r.skipped = true;
    r.skip_reason = "no RC requests in the capture";
    return {r};
  }
  std::vector<ReplayResult> results;
  for (const auto& [a, b] : directions) results.push_back(Replay(packets, a, b).Run());
  return results;
}

}  // namespace

std::vector<ReplayResult> ReplayResponder(const std::vector<CapturedFrame>& frames) {
  if (IsUdCapture(frames)) return ReplayUd(frames, /*sender=*/false);
  return ReplayEachDirection<DirectionReplay>(frames);
}

std::vector<ReplayResult> ReplayRequester(const std::vector<CapturedFrame>& frames) {
  if (IsUdCapture(frames)) return ReplayUd(frames, /*sender=*/true);
  return ReplayEachDirection<RequesterReplay>(frames);
}

}  // namespace droce::sim
