// Plasma shell update script of the KDE test image (tests/desktop-guest/run --desktop plasma-x11|plasma-wayland),
// run once by plasmashell after it has laid out the new user's desktop: a plain #3465a4 background, which the
// remote-viewer check looks for in its window.
var all = desktops();
for (var i = 0; i < all.length; i++) {
    all[i].wallpaperPlugin = "org.kde.color";
    all[i].currentConfigGroup = ["Wallpaper", "org.kde.color", "General"];
    all[i].writeConfig("Color", "#3465a4");
}
