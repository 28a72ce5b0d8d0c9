// Strings from files, file names and flags made safe for where the programs put them. A checkpoint's metadata or
// a log's file name is data, not markup: printed raw, "\x1b]0;...\x07" would retitle the terminal, and in an SVG
// "<" would break the document.
//   terminal_text: control characters (C0, DEL, and the C1 range U+0080..U+009F, which some terminals obey as
//     escapes) and bytes that are not UTF-8 become \xNN, one per byte; everything else, backslash included, is
//     kept, so ordinary text reads unchanged.
//   xml_text: & < > " ' become entities, control characters are dropped, bytes that are not UTF-8 become U+FFFD:
//     the result is valid inside an XML element or either kind of quoted attribute.
#pragma once
#include <string>

namespace eng {

std::string terminal_text(const std::string& text);
std::string xml_text(const std::string& text);

}  // namespace eng
