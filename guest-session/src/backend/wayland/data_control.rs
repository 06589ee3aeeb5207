//! One face for the two data-control protocols: `ext_data_control_v1` (staging) and `zwlr_data_control_v1`.
//!
//! Both have the same requests and events, so a macro writes the `Dispatch` impls for each and turns their events
//! into [`DeviceEvent`]s and [`SourceEvent`]s; [`Manager`], [`Device`], [`Source`] and [`Offer`] wrap the
//! proxies of either protocol. The clipboard logic ([`super::clipboard`]) sees only these.

use std::os::fd::{BorrowedFd, OwnedFd};
use std::sync::Mutex;

use wayland_client::backend::ObjectId;
use wayland_client::protocol::wl_seat::WlSeat;
use wayland_client::{Connection, Dispatch, Proxy, QueueHandle};
use wayland_protocols::ext::data_control::v1::client as ext;
use wayland_protocols_wlr::data_control::v1::client as wlr;

use super::State;

/// MIME types a data offer announced (user data of offer objects).
#[derive(Debug, Default)]
pub struct OfferData(Mutex<Vec<String>>);

impl OfferData {
    fn push(&self, mime: String) {
        if let Ok(mut v) = self.0.lock() {
            v.push(mime);
        }
    }
    fn get(&self) -> Vec<String> {
        self.0.lock().map(|v| v.clone()).unwrap_or_default()
    }
}

/// An event of a data device, for either protocol.
#[derive(Debug)]
pub enum DeviceEvent {
    /// CLIPBOARD changed (None: empty).
    Selection(Option<Offer>),
    /// PRIMARY changed (None: empty).
    Primary(Option<Offer>),
    /// The device is gone.
    Finished,
}

/// An event of one of our data sources.
#[derive(Debug)]
pub enum SourceEvent {
    /// A client pastes: write the data as `mime` to the fd.
    Send(String, OwnedFd),
    /// Another client took the selection.
    Cancelled,
}

macro_rules! wrappers {
    ($($(#[$m:meta])* $name:ident { $ext:ty, $wlr:ty })*) => {$(
        $(#[$m])*
        #[derive(Debug, Clone)]
        pub enum $name {
            /// ext-data-control-v1.
            Ext($ext),
            /// zwlr-data-control-v1.
            Wlr($wlr),
        }
        #[allow(dead_code)] // not every wrapper needs it
        impl $name {
            /// The protocol object id.
            pub fn id(&self) -> ObjectId {
                match self {
                    Self::Ext(p) => p.id(),
                    Self::Wlr(p) => p.id(),
                }
            }
        }
    )*};
}

wrappers! {
    /// The data-control manager global.
    Manager { ext::ext_data_control_manager_v1::ExtDataControlManagerV1, wlr::zwlr_data_control_manager_v1::ZwlrDataControlManagerV1 }
    /// The data device of the seat.
    Device { ext::ext_data_control_device_v1::ExtDataControlDeviceV1, wlr::zwlr_data_control_device_v1::ZwlrDataControlDeviceV1 }
    /// A selection we own for the host.
    Source { ext::ext_data_control_source_v1::ExtDataControlSourceV1, wlr::zwlr_data_control_source_v1::ZwlrDataControlSourceV1 }
    /// A selection offered by a guest application.
    Offer { ext::ext_data_control_offer_v1::ExtDataControlOfferV1, wlr::zwlr_data_control_offer_v1::ZwlrDataControlOfferV1 }
}

impl Manager {
    /// The data device of `seat`.
    pub fn get_data_device(&self, seat: &WlSeat, qh: &QueueHandle<State>) -> Device {
        match self {
            Self::Ext(m) => Device::Ext(m.get_data_device(seat, qh, ())),
            Self::Wlr(m) => Device::Wlr(m.get_data_device(seat, qh, ())),
        }
    }
    /// A new data source offering `mimes`.
    pub fn create_source(&self, mimes: &[&str], qh: &QueueHandle<State>) -> Source {
        match self {
            Self::Ext(m) => {
                let s = m.create_data_source(qh, ());
                mimes.iter().for_each(|t| s.offer((*t).to_owned()));
                Source::Ext(s)
            }
            Self::Wlr(m) => {
                let s = m.create_data_source(qh, ());
                mimes.iter().for_each(|t| s.offer((*t).to_owned()));
                Source::Wlr(s)
            }
        }
    }
}

impl Device {
    /// Sets (or clears) CLIPBOARD (`primary` false) or PRIMARY. A source of the other protocol is ignored.
    pub fn set(&self, primary: bool, source: Option<&Source>) {
        match self {
            Self::Ext(d) => {
                let s = match source {
                    Some(Source::Ext(s)) => Some(s),
                    Some(Source::Wlr(_)) => return,
                    None => None,
                };
                if primary {
                    d.set_primary_selection(s);
                } else {
                    d.set_selection(s);
                }
            }
            Self::Wlr(d) => {
                let s = match source {
                    Some(Source::Wlr(s)) => Some(s),
                    Some(Source::Ext(_)) => return,
                    None => None,
                };
                if primary {
                    d.set_primary_selection(s);
                } else {
                    d.set_selection(s);
                }
            }
        }
    }
}

impl Source {
    /// Destroys the source.
    pub fn destroy(&self) {
        match self {
            Self::Ext(s) => s.destroy(),
            Self::Wlr(s) => s.destroy(),
        }
    }
}

impl Offer {
    /// The MIME types it announced.
    pub fn mimes(&self) -> Vec<String> {
        match self {
            Self::Ext(o) => o.data::<OfferData>().map(OfferData::get),
            Self::Wlr(o) => o.data::<OfferData>().map(OfferData::get),
        }
        .unwrap_or_default()
    }
    /// Asks the owner to write the data as `mime` into `fd`.
    pub fn receive(&self, mime: &str, fd: BorrowedFd<'_>) {
        match self {
            Self::Ext(o) => o.receive(mime.to_owned(), fd),
            Self::Wlr(o) => o.receive(mime.to_owned(), fd),
        }
    }
    /// Destroys the offer.
    pub fn destroy(&self) {
        match self {
            Self::Ext(o) => o.destroy(),
            Self::Wlr(o) => o.destroy(),
        }
    }
}

macro_rules! impls {
    ($proto:ident, $variant:ident,
     $mgr:ty, $dev_mod:ident :: $dev:ident, $src_mod:ident :: $src:ident, $off_mod:ident :: $off:ident) => {
        impl Dispatch<$mgr, ()> for State {
            fn event(
                _: &mut Self,
                _: &$mgr,
                _: <$mgr as Proxy>::Event,
                _: &(),
                _: &Connection,
                _: &QueueHandle<Self>,
            ) {
            }
        }

        impl Dispatch<$proto::$dev_mod::$dev, ()> for State {
            fn event(
                state: &mut Self,
                _: &$proto::$dev_mod::$dev,
                event: $proto::$dev_mod::Event,
                _: &(),
                _: &Connection,
                _: &QueueHandle<Self>,
            ) {
                use $proto::$dev_mod::Event as E;
                let ev = match event {
                    // The offer's MIME types arrive on the offer itself (see event_created_child below).
                    E::DataOffer { .. } => return,
                    E::Selection { id } => DeviceEvent::Selection(id.map(Offer::$variant)),
                    E::PrimarySelection { id } => DeviceEvent::Primary(id.map(Offer::$variant)),
                    E::Finished => DeviceEvent::Finished,
                    _ => return,
                };
                state.on_device_event(ev);
            }

            wayland_client::event_created_child!(State, $proto::$dev_mod::$dev, [
                $proto::$dev_mod::EVT_DATA_OFFER_OPCODE => ($proto::$off_mod::$off, OfferData::default())
            ]);
        }

        impl Dispatch<$proto::$src_mod::$src, ()> for State {
            fn event(
                state: &mut Self,
                source: &$proto::$src_mod::$src,
                event: $proto::$src_mod::Event,
                _: &(),
                _: &Connection,
                _: &QueueHandle<Self>,
            ) {
                use $proto::$src_mod::Event as E;
                let ev = match event {
                    E::Send { mime_type, fd } => SourceEvent::Send(mime_type, fd),
                    E::Cancelled => SourceEvent::Cancelled,
                    _ => return,
                };
                state.on_source_event(&source.id(), ev);
            }
        }

        impl Dispatch<$proto::$off_mod::$off, OfferData> for State {
            fn event(
                _: &mut Self,
                _: &$proto::$off_mod::$off,
                event: $proto::$off_mod::Event,
                data: &OfferData,
                _: &Connection,
                _: &QueueHandle<Self>,
            ) {
                if let $proto::$off_mod::Event::Offer { mime_type } = event {
                    data.push(mime_type);
                }
            }
        }
    };
}

impls!(
    ext,
    Ext,
    ext::ext_data_control_manager_v1::ExtDataControlManagerV1,
    ext_data_control_device_v1::ExtDataControlDeviceV1,
    ext_data_control_source_v1::ExtDataControlSourceV1,
    ext_data_control_offer_v1::ExtDataControlOfferV1
);
impls!(
    wlr,
    Wlr,
    wlr::zwlr_data_control_manager_v1::ZwlrDataControlManagerV1,
    zwlr_data_control_device_v1::ZwlrDataControlDeviceV1,
    zwlr_data_control_source_v1::ZwlrDataControlSourceV1,
    zwlr_data_control_offer_v1::ZwlrDataControlOfferV1
);
