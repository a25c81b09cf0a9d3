#include "drivers/pcap/pcap_io.h"

#include <pcap/pcap.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace droce::pcapio {

struct PcapReader::Handle {
  pcap_t* pcap = nullptr;
  ~Handle() {
    if (pcap != nullptr) pcap_close(pcap);
  }
};

PcapReader::PcapReader(std::string path, std::unique_ptr<Handle> h)
    : path_(std::move(path)), h_(std::move(h)) {}
PcapReader::PcapReader(PcapReader&&) noexcept = default;
PcapReader& PcapReader::operator=(PcapReader&&) noexcept = default;
PcapReader::~PcapReader() = default;

absl::StatusOr<PcapReader> PcapReader::Open(const std::string& path) {
  // libpcap's own message for a missing file is "No such file or directory"
  // without saying which; probe first so the error names the file and kind.
  if (FILE* f = std::fopen(path.c_str(), "rb"); f == nullptr) {
    const int err = errno;
    const std::string msg = absl::StrCat(path, ": ", std::strerror(err));
    return err == ENOENT ? absl::NotFoundError(msg) : absl::PermissionDeniedError(msg);
  } else {
    std::fclose(f);
  }
  char errbuf[PCAP_ERRBUF_SIZE] = {};
  pcap_t* p =
      pcap_open_offline_with_tstamp_precision(path.c_str(), PCAP_TSTAMP_PRECISION_NANO, errbuf);
  if (p == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a readable capture: ", errbuf));
  }
  auto h = std::make_unique<Handle>();
  h->pcap = p;
  return PcapReader(path, std::move(h));
}

std::optional<PcapPacket> PcapReader::Next() {
  if (!h_ || !status_.ok()) return std::nullopt;
  pcap_pkthdr* hdr = nullptr;
  const u_char* data = nullptr;
  const int rc = pcap_next_ex(h_->pcap, &hdr, &data);
  if (rc == 1) {
    PcapPacket pkt;
    pkt.data = data;
    pkt.caplen = hdr->caplen;
    pkt.len = hdr->len;
    // Opened with nanosecond precision: tv_usec holds nanoseconds.
    pkt.ts_ns = int64_t{hdr->ts.tv_sec} * 1000000000 + hdr->ts.tv_usec;
    return pkt;
  }
  if (rc == PCAP_ERROR_BREAK) return std::nullopt;  // end of file
  status_ = absl::DataLossError(absl::StrCat(path_, ": ", pcap_geterr(h_->pcap)));
  return std::nullopt;
}

int PcapReader::link_type() const { return h_ ? pcap_datalink(h_->pcap) : -1; }
uint32_t PcapReader::snaplen() const {
  return h_ ? static_cast<uint32_t>(pcap_snapshot(h_->pcap)) : 0;
}

struct PcapWriter::Handle {
  pcap_t* pcap = nullptr;
  pcap_dumper_t* dumper = nullptr;
  ~Handle() {
    if (dumper != nullptr) pcap_dump_close(dumper);
    if (pcap != nullptr) pcap_close(pcap);
  }
};

PcapWriter::PcapWriter(std::string path, std::unique_ptr<Handle> h, uint32_t snaplen)
    : path_(std::move(path)), h_(std::move(h)), snaplen_(snaplen) {}
PcapWriter::PcapWriter(PcapWriter&&) noexcept = default;
PcapWriter& PcapWriter::operator=(PcapWriter&&) noexcept = default;
PcapWriter::~PcapWriter() = default;

absl::StatusOr<PcapWriter> PcapWriter::Create(const std::string& path, uint32_t snaplen) {
  if (snaplen == 0) return absl::InvalidArgumentError("pcap snaplen must be positive");
  auto h = std::make_unique<Handle>();
  h->pcap = pcap_open_dead(DLT_EN10MB, static_cast<int>(snaplen));
  if (h->pcap == nullptr) return absl::InternalError("pcap_open_dead failed");
  h->dumper = pcap_dump_open(h->pcap, path.c_str());
  if (h->dumper == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat(path, ": cannot create capture: ", pcap_geterr(h->pcap)));
  }
  return PcapWriter(path, std::move(h), snaplen);
}

absl::Status PcapWriter::Write(std::span<const uint8_t> frame, int64_t ts_ns) {
  if (!h_ || h_->dumper == nullptr) {
    return absl::FailedPreconditionError(absl::StrCat(path_, ": writer is closed"));
  }
  pcap_pkthdr hdr{};
  hdr.ts.tv_sec = static_cast<time_t>(ts_ns / 1000000000);
  hdr.ts.tv_usec = static_cast<suseconds_t>((ts_ns % 1000000000) / 1000);
  hdr.len = static_cast<uint32_t>(frame.size());
  hdr.caplen = hdr.len < snaplen_ ? hdr.len : snaplen_;
  pcap_dump(reinterpret_cast<u_char*>(h_->dumper), &hdr, frame.data());
  ++packets_;
  return absl::OkStatus();
}

absl::Status PcapWriter::Flush() {
  if (!h_ || h_->dumper == nullptr) return absl::OkStatus();
  if (pcap_dump_flush(h_->dumper) != 0) {
    return absl::DataLossError(absl::StrCat(path_, ": write failed: ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status PcapWriter::Close() {
  if (!h_ || h_->dumper == nullptr) return absl::OkStatus();
  absl::Status s = Flush();
  pcap_dump_close(h_->dumper);
  h_->dumper = nullptr;
  return s;
}

absl::StatusOr<std::vector<OwnedPacket>> ReadAll(const std::string& path) {
  absl::StatusOr<PcapReader> r = PcapReader::Open(path);
  if (!r.ok()) return r.status();
  if (r->link_type() != kLinkTypeEthernet) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": link type ", r->link_type(), " is not Ethernet"));
  }
  std::vector<OwnedPacket> out;
  while (std::optional<PcapPacket> p = r->Next()) {
    out.push_back({std::vector<uint8_t>(p->data, p->data + p->caplen), p->len, p->ts_ns});
  }
  if (!r->status().ok()) return r->status();
  return out;
}

}  // namespace droce::pcapio
