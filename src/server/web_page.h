// The web chat page served at "/": one HTML file (src/server/web/index.html) compiled into the binary,
// with its script and styles inline, so it works offline and needs no CDN.
#pragma once

#include <string_view>

namespace zinc::server {

std::string_view web_page_html();

}  // namespace zinc::server
